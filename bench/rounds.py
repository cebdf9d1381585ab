"""What every speed bench reports the same way: arms run in alternating rounds (so machine noise hits all
of them alike), each arm's median with its min-max, the machine's load, and the versions, as one JSON
document. Never best-of: the median of all rounds is the figure, the range says how far to trust it."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Mapping
from importlib import metadata

PACKAGES = ("torch", "transformers", "deepspeed", "trl", "peft", "sglang-router")


def alternate(arms: Mapping[str, Callable[[int], dict]], rounds: int) -> dict[str, list[dict]]:
    """Each round runs every arm once, in an order that rotates with the round, so no arm always runs first
    (warm caches) or last (a hot CPU); `arms[name](round_index)` returns that run's figures."""
    names = list(arms)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(arms[name](index))
    return runs


def spread(values: list[float]) -> dict:
    """The median and the range of `values` (each round's figure)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": len(values)}


def ratio_spread(ours: list[float], theirs: list[float]) -> dict:
    """Per-round ratios (rounds paired as they alternated), their median and range."""
    return spread([a / b for a, b in zip(ours, theirs, strict=True) if b])


def machine() -> dict:
    """Load averages before the figures were taken, CPU count and the versions that decide the speed."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "machine": platform.machine(), "python": platform.python_version(), "versions": versions}
