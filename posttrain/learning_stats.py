"""The statistics of the learning bench (posttrain/learning_bench.py): a mean with its Student's t confidence
interval, and paired differences.

The t quantile is scipy's (a dev dependency): torch.distributions.StudentT has no icdf, and a hand-written
inverse of the incomplete beta function is numerical code a library already has, tested.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy import stats

LEVEL = 0.95


@dataclass(frozen=True)
class MeanInterval:
    """A sample's mean and its two-sided Student's t confidence interval (n-1 degrees of freedom); with one
    value there is no spread to estimate, so no interval (lo, hi None)."""

    mean: float
    lo: float | None
    hi: float | None
    n: int
    level: float = LEVEL

    @property
    def df(self) -> int:
        return self.n - 1


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    return float(stats.t.ppf(p, df))


def mean_interval(values: list[float], level: float = LEVEL) -> MeanInterval:
    if not values:
        raise ValueError("no values: a mean needs at least one")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return MeanInterval(mean, None, None, len(values), level)
    half = t_quantile(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return MeanInterval(mean, mean - half, mean + half, len(values), level)


def paired_differences(first: dict[int, float], second: dict[int, float]) -> dict[int, float]:
    """{seed: second - first} for each seed both have: what arm B gained over arm A on the same seed."""
    if set(first) != set(second):
        raise ValueError(f"the arms ran different seeds: {sorted(first)} and {sorted(second)}")
    return {seed: second[seed] - first[seed] for seed in sorted(first)}
