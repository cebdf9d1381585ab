"""Learning-rate schedules by optimizer step: cosine with warm-up, and the DSA phases of SFT."""

from __future__ import annotations

import math

from stages.sft.config import DsaSchedule


def cosine_with_warmup(step: int, total: int, warmup: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def dsa_phase(step: int, schedule: DsaSchedule) -> str:
    """"dense", "indexer_warmup" or "sparse" (see DsaSchedule)."""
    if step < schedule.dense_steps:
        return "dense"
    if step < schedule.dense_steps + schedule.indexer_warmup_steps:
        return "indexer_warmup"
    return "sparse"


def main_lr_multiplier(step: int, total: int, warmup: int, min_ratio: float, schedule: DsaSchedule) -> float:
    # During the indexer warm-up the main model is frozen: learning rate 0 also stops AdamW's decay.
    if dsa_phase(step, schedule) == "indexer_warmup":
        return 0.0
    return cosine_with_warmup(step, total, warmup, min_ratio)
