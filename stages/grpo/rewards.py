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
