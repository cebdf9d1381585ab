"""From prompt rows to engine samples to a training batch, keeping the engine's exact token ids (TITO)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from rewards import RewardModule, RewardSample, score_batch
from rollout.client import Sample
from rollout.trajectory import prompt_ids
from stages.evaluation.references import prompt_messages, reference_answer, row_tools


@dataclass(frozen=True)
class RlPrompt:
    id: str
    messages: tuple[dict, ...]
    reference: str | None
    prompt_ids: list[int]
    metadata: Mapping = field(default_factory=dict)  # what reward modules read besides the reference (domain, rules)


def rl_prompts(rows: Sequence[Mapping], tokenizer) -> list[RlPrompt]:
    """Each row's conversation up to its first reply, rendered with thinking on, as token ids."""
    prompts = []
    for row in rows:
        messages = prompt_messages(row)
        ids = prompt_ids(tokenizer, list(messages), row_tools(row))
        prompts.append(RlPrompt(row["id"], messages, reference_answer(row), ids))
    return prompts


@dataclass(frozen=True)
class WeightedReward:
    name: str
    module: RewardModule
    weight: float


def group_rewards(
    prompts: Sequence[RlPrompt], samples: Sequence[Sample], group_size: int, rewards: Sequence[WeightedReward],
    tokenizer, timeout_s: float,
) -> tuple[torch.Tensor, dict[str, float], list[bool]]:
    """[groups, G] weighted rewards; per-module means; which groups are kept.

    A group with any unscorable (None) sample is dropped whole: its advantages would be computed
    against a partial group. Dropped groups are counted by the caller, never scored as 0.
    """
    texts = [tokenizer.decode(s.output_ids, skip_special_tokens=False) for s in samples]
    reward_samples = [
        RewardSample(prompts[i // group_size].messages, text, prompts[i // group_size].reference,
                     {**prompts[i // group_size].metadata, "thinking": True})
        for i, text in enumerate(texts)
    ]
    total = torch.zeros(len(samples), dtype=torch.float64)
    scorable = torch.ones(len(samples), dtype=torch.bool)
    means = {}
    for reward in rewards:
        scores = score_batch(reward.module, reward_samples, timeout_s)
        valid = [s for s in scores if s is not None]
        means[f"reward/{reward.name}"] = sum(valid) / len(valid) if valid else float("nan")
        for i, score in enumerate(scores):
            if score is None:
                scorable[i] = False
            else:
                total[i] += reward.weight * score
    groups = total.view(-1, group_size)
    kept = scorable.view(-1, group_size).all(dim=1).tolist()
    return groups, means, kept


def informative_groups(rewards: torch.Tensor, kept: Sequence[bool], count: int) -> list[int]:
    """`count` group indices, those whose rewards differ first (DAPO's dynamic sampling), in draw order.

    An all-equal group has zero advantage everywhere: training on it only dilutes the batch.
    When too few groups carry signal the rest are filled with the others, so every step has `count`.
    """
    signal = (rewards != rewards[:, :1]).any(dim=1).tolist()
    order = [g for g in range(len(signal)) if signal[g] and kept[g]]
    order += [g for g in range(len(signal)) if g not in order]
    return order[:count]


@dataclass
class TrainBatch:
    """Right-padded prompt + response sequences; per-target tensors are aligned with input_ids[:, 1:]."""

    input_ids: torch.Tensor  # [N, L]
    attention_mask: torch.Tensor  # [N, L]
    response_mask: torch.Tensor  # [N, L-1]: 1 where the target is a generated token
    logp_infer: torch.Tensor  # [N, L-1]: the engine's logprob of that target

    @property
    def response_tokens(self) -> int:
        return int(self.response_mask.sum())


def train_batch(samples: Sequence[Sample], pad_id: int) -> TrainBatch:
    """The sampled sequences exactly as the engine returned their ids, ready for the loss."""
    return padded_batch([(s.prompt_ids, s.output_ids, [1] * len(s.output_ids), s.output_logprobs) for s in samples], pad_id)


def padded_batch(sequences: Sequence[tuple[list[int], list[int], list[int], list[float]]], pad_id: int) -> TrainBatch:
    """(prompt ids, response ids, response loss mask, response logprobs) rows → right-padded tensors.

    The response may hold environment tokens (mask 0) between the model's turns (agentic RL)."""
    width = max(len(prompt) + len(response) for prompt, response, _, _ in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    trained = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    logp_infer = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    for row, (prompt, response, mask, logprobs) in enumerate(sequences):
        if not len(logprobs) == len(mask) == len(response):
            raise ValueError(f"row {row}: {len(logprobs)} logprobs and {len(mask)} mask values for {len(response)} tokens")
        sequence = prompt + response
        ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        # Target position t predicts sequence[t + 1]: the response is targets len(prompt)-1 onwards.
        start, end = len(prompt) - 1, len(sequence) - 1
        trained[row, start:end] = torch.tensor(mask, dtype=torch.float32)
        logp_infer[row, start:end] = torch.tensor(logprobs)
    return TrainBatch(ids, attention, trained, logp_infer)
