"""Online difficulty: a running pass rate per prompt, and draws that favour prompts the policy sometimes solves.

A group whose samples all pass or all fail carries no signal (dynamic sampling passes it over), so a prompt
the policy always or never solves mostly wastes its draws. Every group drawn of a prompt, trained on or not,
updates the prompt's pass rate, an average that decays per group (`DifficultySettings.decay`) so it follows
the changing policy. A prompt whose rate is outside the band is drawn with `outside_weight` instead of 1, never
0: it still comes back, and is measured again, as the policy changes. A prompt not yet seen `min_samples`
times is drawn normally.

Several trainer ranks keep one tracker alike: each rank's observations reach every rank (`observe_everywhere`)
in rank order, so draws made from a shared rng stay the same on every rank. The agentic producer draws on its
own thread while the trainer updates, hence the lock.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from stages.common.config import DifficultySettings
from stages.common.distributed import all_gather_objects

Item = TypeVar("Item")


@dataclass
class PromptRecord:
    passes: float  # decayed
    samples: float  # decayed
    seen: int  # every sample ever observed: whether the estimate counts yet (`min_samples`)


@dataclass(frozen=True)
class Observation:
    prompt_id: str
    passes: int
    samples: int


class PassRates:
    """Each prompt's running pass rate, by prompt id, and draws weighted by it."""

    def __init__(self, settings: DifficultySettings, group_size: int):
        self.settings = settings
        self.min_samples = settings.min_samples if settings.min_samples is not None else group_size
        self._prompts: dict[str, PromptRecord] = {}
        self._lock = threading.Lock()

    def update(self, prompt_id: str, passes: int, samples: int) -> None:
        """A group of `samples` scored samples of the prompt, `passes` of them passed; earlier evidence decays."""
        if not 0 <= passes <= samples:
            raise ValueError(f"prompt {prompt_id}: {passes} passes of {samples} samples")
        if not samples:  # nothing scored (every sample failed to score or its environment crashed)
            return
        decay = self.settings.decay
        with self._lock:
            old = self._prompts.get(prompt_id, PromptRecord(0.0, 0.0, 0))
            self._prompts[prompt_id] = PromptRecord(decay * old.passes + passes, decay * old.samples + samples,
                                                    old.seen + samples)

    def rate(self, prompt_id: str) -> float | None:
        """The running pass rate, None until `min_samples` samples of the prompt were seen."""
        with self._lock:
            return self._rate(prompt_id)

    def weight(self, prompt_id: str) -> float:
        with self._lock:
            return self._weight(prompt_id)

    def outside_band(self, prompt_id: str) -> bool:
        with self._lock:
            return self._outside(prompt_id)

    def draw(self, rng, items: Sequence[Item], count: int, id_of: Callable[[Item], str]) -> list[Item]:
        """`count` distinct items, each next one chosen with probability proportional to its weight among those
        left (Efraimidis–Spirakis: the `count` smallest exponential clocks scaled by 1/weight); the same list
        for the same rng state and the same rates."""
        if count > len(items):
            raise ValueError(f"cannot draw {count} distinct prompts from {len(items)}")
        with self._lock:
            weights = [self._weight(id_of(item)) for item in items]
        clocks = [rng.expovariate(1.0) / weight for weight in weights]
        return [items[i] for i in heapq.nsmallest(count, range(len(items)), key=clocks.__getitem__)]

    def counts(self) -> dict[str, int]:
        """For the step record: prompts with any sample seen, and those whose rate is outside the band."""
        with self._lock:
            return {"difficulty_tracked": len(self._prompts),
                    "difficulty_outside_band": sum(map(self._outside, self._prompts))}

    def state(self) -> dict:
        """What a resumed run restores (JSON): every prompt's decayed passes and samples, and samples seen."""
        with self._lock:
            return {pid: [r.passes, r.samples, r.seen] for pid, r in self._prompts.items()}

    def restore(self, state: dict) -> None:
        with self._lock:
            self._prompts = {pid: PromptRecord(float(p), float(s), int(n)) for pid, (p, s, n) in state.items()}

    def _rate(self, prompt_id: str) -> float | None:
        record = self._prompts.get(prompt_id)
        if record is None or record.seen < self.min_samples:
            return None
        return record.passes / record.samples

    def _outside(self, prompt_id: str) -> bool:
        rate, band = self._rate(prompt_id), self.settings.band
        return rate is not None and not band.low < rate < band.high

    def _weight(self, prompt_id: str) -> float:
        return self.settings.outside_weight if self._outside(prompt_id) else 1.0


def observe_everywhere(pass_rates: PassRates, observed: list[Observation]) -> None:
    """Every rank's `observed` groups, in rank order, into every rank's tracker: the trackers stay alike. Every
    rank calls it at the same point of its loop (it is a collective)."""
    for rank_observed in all_gather_objects(observed):
        for observation in rank_observed:
            pass_rates.update(observation.prompt_id, observation.passes, observation.samples)


def difficulty_metrics(pass_rates: PassRates | None, drawn_outside_band: int) -> dict[str, int]:
    """The step record's difficulty counts; nothing when difficulty is off."""
    if pass_rates is None:
        return {}
    return {**pass_rates.counts(), "drawn_outside_band": drawn_outside_band}


def pass_rates_for(settings: DifficultySettings, group_size: int) -> PassRates | None:
    """The stage's tracker, None when difficulty is off (draws stay uniform, records unchanged)."""
    return PassRates(settings, group_size) if settings.enabled else None
