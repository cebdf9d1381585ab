"""`arith`: every problem asked twice, thinking on and thinking off; one turn each, exact-match answers."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from model.turns import TurnScore, score_turn
from stages.common.prompts import prompt_messages, reference_answer, row_tools
from stages.evaluation.prompts import GenerateTurns, Prompt
from suites.answers import stated_integer

OPERATOR = re.compile(r" [-+*] ")


@dataclass(frozen=True)
class ArithResult:
    id: str
    expected: int
    level: int  # operations in the problem (suites.arith difficulty)
    turn: TurnScore

    @property
    def answer(self) -> int | None:
        return stated_integer(self.turn.parsed.reply) if self.turn.parsed.well_formed else None

    @property
    def format_valid(self) -> bool:
        # A reply that is not exactly "The answer is <int>." would be unreadable to a grader.
        return self.turn.format_valid and not self.turn.parsed.tool_calls and self.answer is not None

    @property
    def correct(self) -> bool:
        return self.answer == self.expected


def score_arith(row_id: str, expected: int, level: int, text: str, thinking: bool) -> ArithResult:
    return ArithResult(row_id, expected, level, score_turn(text, thinking))


def problem_level(row: Mapping) -> int:
    """The number of operations the question asks for: binary operators between its operands."""
    question = prompt_messages(row)[-1]["content"]
    return len(OPERATOR.findall(question))


def run_arith(
    rows: Sequence[Mapping], generate: GenerateTurns, *, batch_size: int, advance: Callable[[int], None]
) -> list[ArithResult]:
    """Results in row order, the thinking-on turn of a row before its thinking-off turn."""
    asked = [(row, thinking) for row in rows for thinking in (True, False)]
    results = []
    for start in range(0, len(asked), batch_size):
        batch = asked[start : start + batch_size]
        texts = generate([Prompt(prompt_messages(row), row_tools(row), thinking) for row, thinking in batch])
        for (row, thinking), text in zip(batch, texts, strict=True):
            results.append(score_arith(row["id"], int(reference_answer(row)), problem_level(row), text, thinking))
        advance(len(batch) / 2)
    return results
