"""Rule-verified rewards for the suites whose answers can be checked exactly."""

from __future__ import annotations

from collections.abc import Sequence

from rewards.protocol import RewardSample
from stages.evaluation.answers import stated_integer
from stages.evaluation.turns import score_turn


class ArithExactMatch:
    """1 when the reply states exactly the reference integer ("The answer is N."), else 0.

    A malformed turn (no closed reasoning, no stop token) scores 0: a reply the parser cannot read
    has not stated anything. Samples without a reference cannot be scored: None.
    """

    name = "arith_exact_match"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        scores: list[float | None] = []
        for sample in samples:
            if sample.reference is None:
                scores.append(None)
                continue
            turn = score_turn(sample.response, thinking=bool(sample.metadata.get("thinking", True)))
            stated = stated_integer(turn.parsed.reply) if turn.format_valid else None
            scores.append(float(stated is not None and stated == int(sample.reference)))
        return scores


class FormatValid:
    """1 when the turn parses (closed reasoning when thinking, well-formed tool calls, a stop token), else 0."""

    name = "format_valid"
    version = "1"

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        return [float(score_turn(s.response, thinking=bool(s.metadata.get("thinking", True))).format_valid)
                for s in samples]
