"""Where a stage's time goes: the one stopwatch its step records' `*_s` and `*_per_s` metrics are read from."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Elapsed:
    started: float
    ended: float | None = None

    @property
    def seconds(self) -> float:
        """Since `started`: up to now while its block runs, up to the block's end after it."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


@contextmanager
def timed() -> Iterator[Elapsed]:
    """`with timed() as rollout: ...`, then `rollout.seconds` (monotonic clock)."""
    elapsed = Elapsed(time.monotonic())
    try:
        yield elapsed
    finally:
        elapsed.ended = time.monotonic()
