"""Scoring a step's groups with the configured reward modules, and choosing the groups worth training on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rewards import RewardModule, RewardSample, score_batch
from rollout.client import Sample
from stages.common.prompts import RlPrompt


@dataclass(frozen=True)
class WeightedReward:
    name: str
    module: RewardModule
    weight: float


@dataclass(frozen=True)
class GroupRewards:
    total: torch.Tensor  # [groups, G]: the weighted sum of the modules' scores
    means: dict[str, float]  # reward/<module>: each module's mean over the samples it scored
    kept: list[bool]  # per group: every sample scorable
    scores: list[list[dict]]  # per sample: {"module", "score"} of every module (None: could not score it)


def reward_sample(prompt: RlPrompt, text: str) -> RewardSample:
    """What a reward module reads of a completion of `prompt` (RL samples are generated thinking)."""
    return RewardSample(prompt.messages, text, prompt.reference, {**prompt.metadata, "thinking": True})


def group_rewards(
    prompts: Sequence[RlPrompt], samples: Sequence[Sample], group_size: int, rewards: Sequence[WeightedReward],
    tokenizer, timeout_s: float,
) -> GroupRewards:
    """Every sample scored by every module, weighted and summed per group.

    A group with any unscorable (None) sample is dropped whole: its advantages would be computed
    against a partial group. Dropped groups are counted by the caller, never scored as 0.
    """
    texts = [tokenizer.decode(s.output_ids, skip_special_tokens=False) for s in samples]
    reward_samples = [reward_sample(prompts[i // group_size], text) for i, text in enumerate(texts)]
    total = torch.zeros(len(samples), dtype=torch.float64)
    scorable = torch.ones(len(samples), dtype=torch.bool)
    means, scores = {}, [[] for _ in samples]
    for reward in rewards:
        module_scores = score_batch(reward.module, reward_samples, timeout_s)
        valid = [s for s in module_scores if s is not None]
        means[f"reward/{reward.name}"] = sum(valid) / len(valid) if valid else float("nan")
        for i, score in enumerate(module_scores):
            scores[i].append({"module": reward.name, "score": score})
            if score is None:
                scorable[i] = False
            else:
                total[i] += reward.weight * score
    return GroupRewards(total.view(-1, group_size), means, scorable.view(-1, group_size).all(dim=1).tolist(), scores)


def informative_groups(rewards: torch.Tensor, kept: Sequence[bool], count: int) -> list[int]:
    """`count` group indices, those whose rewards differ first (DAPO's dynamic sampling), in draw order.

    An all-equal group has zero advantage everywhere: training on it only dilutes the batch.
    When too few groups carry signal the rest are filled with the others, so every step has `count`.
    """
    signal = (rewards != rewards[:, :1]).any(dim=1).tolist()
    order = [g for g in range(len(signal)) if signal[g] and kept[g]]
    order += [g for g in range(len(signal)) if g not in order]
    return order[:count]


def group_passes(scored: GroupRewards, anchors: torch.Tensor, solved_at: float) -> list[tuple[int, int]]:
    """(passes, samples) per group: its policy samples that every module scored, and those of them whose total
    is at least `solved_at`. Anchor members are a person's replies, not the policy's: they do not count."""
    group_size = scored.total.shape[1]
    counts = []
    for g, totals in enumerate(scored.total.tolist()):
        members = range(g * group_size, (g + 1) * group_size)
        counted = [total for i, total in zip(members, totals, strict=True)
                   if not anchors[i] and all(entry["score"] is not None for entry in scored.scores[i])]
        counts.append((sum(total >= solved_at for total in counted), len(counted)))
    return counts
