"""Rule rewards for the `instruct` suite: its constraints, checked on the reply, as a hard gate and a soft score.

The constraints travel in the sample's metadata (`constraints`, as the suite's prompt@1 rows carry
them). A sample without constraints is not this module's to score: None. A malformed turn has no
reply to check, so it meets nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.turns import score_turn
from rewards.protocol import RewardSample
from suites import instruct


def _reply(sample: RewardSample) -> str | None:
    turn = score_turn(sample.response, thinking=bool(sample.metadata.get("thinking", True)))
    return turn.parsed.reply if turn.format_valid else None


def _met(sample: RewardSample) -> list[bool] | None:
    constraints = sample.metadata.get("constraints")
    if not constraints:
        return None
    reply = _reply(sample)
    return [reply is not None and instruct.check(constraint, reply) for constraint in constraints]


class InstructGate:
    """1 when the reply meets every constraint of its instruction, else 0: a hard rule for the mix's gate."""

    name = "instruct_gate"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return [None if met is None else float(all(met)) for met in map(_met, samples)]


class InstructSoft:
    """The fraction of its instruction's constraints the reply meets: a soft rule score."""

    name = "instruct_soft"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return [None if met is None else sum(met) / len(met) for met in map(_met, samples)]
