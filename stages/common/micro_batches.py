"""A rank's share of a step in micro-batches, and what their parts add up to.

Each micro-batch's loss is weighted by its share of the step's units (samples, sequences, pairs or
tokens, whatever the stage's loss averages over), so the weighted losses sum to the loss of the whole
share: micro 4 × accumulation 8 trains exactly as micro 32 × accumulation 1.
"""

from __future__ import annotations

from collections.abc import Sequence


def micro_slices(count: int, micro: int) -> list[slice]:
    """Consecutive slices of at most `micro` items covering `count` items."""
    return [slice(start, min(start + micro, count)) for start in range(0, count, micro)]


def merged_stats(parts: Sequence[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Per-micro-batch statistics, each with its weight (its share of the tokens they are fractions or
    means over), as the step's: weighted means, and the largest value of each `*_max`."""
    total = sum(weight for _, weight in parts)
    merged: dict[str, float] = {}
    for key in parts[0][0]:
        values = [(stats[key], weight) for stats, weight in parts]
        if key.endswith("_max"):
            merged[key] = max(value for value, _ in values)
        else:
            merged[key] = sum(value * weight for value, weight in values) / total
    return merged
