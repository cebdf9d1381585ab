"""Bounded retry with exponential backoff and full jitter for whole-object operations.

botocore already retries single HTTP requests; this outer loop covers what survives
it (a connection reset during a long multipart upload, a SlowDown storm) by redoing
the whole operation, which is safe because every store write is idempotent.
"""

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    # Seeding makes the jitter sequence reproducible (tests, incident replays).
    seed: int | None = None


class Retrier:
    def __init__(self, policy: RetryPolicy, is_transient: Callable[[BaseException], bool]) -> None:
        self._policy = policy
        self._is_transient = is_transient
        self._rng = random.Random(policy.seed)

    def call(self, what: str, operation: Callable[[], T]) -> T:
        attempt = 1
        while True:
            try:
                return operation()
            except Exception as exc:
                if attempt >= self._policy.max_attempts or not self._is_transient(exc):
                    raise
                # Full jitter: spreads retries of many workers hitting the same throttled prefix.
                ceiling = min(self._policy.max_delay_s, self._policy.base_delay_s * 2 ** (attempt - 1))
                delay = self._rng.uniform(0, ceiling)
                log.warning(
                    "transient error during %s (attempt %d/%d), retrying in %.2fs: %s",
                    what, attempt, self._policy.max_attempts, delay, exc,
                )
                time.sleep(delay)
                attempt += 1
