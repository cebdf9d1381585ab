"""The one Protocol every reward module meets, whoever wrote it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class RewardSample:
    """What a reward module sees of one rollout: the prompt, the decoded response and the reference."""

    prompt: tuple[dict, ...]  # the conversation the response answers, as chat messages
    response: str  # the generated turn as text, special tokens kept (the format is part of what is scored)
    reference: str | None = None  # a reference answer or a human anchor reply
    metadata: dict = field(default_factory=dict)


@runtime_checkable
class RewardModule(Protocol):
    """Callable on a batch: one score per sample, None where the sample cannot be scored.

    None is counted and logged by the trainer, never replaced by a made-up number.
    """

    name: str
    version: str

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]: ...


@runtime_checkable
class ComposedReward(Protocol):
    """A reward module that scores with other modules (the General RL mix): lineage records each of them."""

    def components(self) -> list[tuple[str, dict, RewardModule]]: ...  # (dotted path, params, module)
