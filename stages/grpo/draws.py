"""A GRPO step's groups: drawn, sampled and scored until enough of them carry signal (dynamic sampling).

With `dynamic_sampling.enabled`, a step draws prompts (`oversample` times the groups still missing),
samples and scores their groups, and draws again while any rank has fewer than its share of groups whose
rewards differ, at most `max_draws` times. Every rank then trains on as many groups with signal as the
rank with the fewest has (at most its share), so the ranks' batches have the same shape; a rank with none
means the step makes no update. Disabled, the step trains on its first draw's groups, those with signal
first. Every drawn group stays counted in the step's record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rollout.client import Sample
from stages.common.config import DynamicSamplingSettings
from stages.common.distributed import all_max
from stages.common.prompts import RlPrompt
from stages.grpo.rewards import GroupRewards, informative_groups


@dataclass(frozen=True)
class StepGroups:
    prompts: list[RlPrompt]  # every prompt drawn this step, in draw order
    samples: list[Sample]  # G per drawn prompt
    scored: GroupRewards  # every drawn group
    chosen: list[int]  # the groups trained on, in draw order (empty: no update this step)
    draws: int

    def counts(self) -> dict[str, int]:
        """This rank's groups drawn, with signal, and trained on."""
        return {"groups_drawn": len(self.prompts), "groups_with_signal": len(signal_groups(self.scored)),
                "groups_trained": len(self.chosen)}


def signal_groups(scored: GroupRewards) -> list[int]:
    """The groups, in draw order, whose rewards differ and whose every sample was scored."""
    differ = (scored.total != scored.total[:, :1]).any(dim=1).tolist()
    return [g for g, (spread, kept) in enumerate(zip(differ, scored.kept, strict=True)) if spread and kept]


def draw_groups(draw: Callable[[int], list[RlPrompt]],
                sample_and_score: Callable[[list[RlPrompt]], tuple[list[Sample], GroupRewards]],
                share: int, oversample: int, settings: DynamicSamplingSettings) -> StepGroups:
    """This rank's groups for a step of `share` groups: `draw(n)` gives n prompts (every rank calls it
    alike, so a draw shared by the ranks stays in step), `sample_and_score` their groups."""
    prompts, samples, parts, draws = [], [], [], 0
    missing = share
    while missing:
        drawn = draw(missing * oversample)
        drawn_samples, scored = sample_and_score(drawn)
        prompts += drawn
        samples += drawn_samples
        parts.append(scored)
        draws += 1
        if not settings.enabled or draws == settings.max_draws:
            break
        missing = int(all_max(max(share - len(signal_groups(merged(parts))), 0)))
    scored = merged(parts)
    if not settings.enabled:
        return StepGroups(prompts, samples, scored, informative_groups(scored.total, scored.kept, share), draws)
    with_signal = signal_groups(scored)
    trained = min(share, -int(all_max(-len(with_signal))))  # the fewest any rank has
    return StepGroups(prompts, samples, scored, with_signal[:trained], draws)


def merged(parts: list[GroupRewards]) -> GroupRewards:
    """Several draws' scores as one: each module's mean over every sample it scored."""
    scores = [sample for part in parts for sample in part.scores]
    names = [entry["module"] for entry in scores[0]]
    means = {}
    for index, name in enumerate(names):
        valid = [sample[index]["score"] for sample in scores if sample[index]["score"] is not None]
        means[f"reward/{name}"] = sum(valid) / len(valid) if valid else float("nan")
    return GroupRewards(torch.cat([part.total for part in parts]), means,
                        [kept for part in parts for kept in part.kept], scores)
