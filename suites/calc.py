"""`calc`: arith problems solved with a calculator tool — tool-integrated reasoning.

The assistant passes the whole expression to `calculate` and states what the tool returned. The
questions are `arith`'s at levels 2-4 (level 1 is all but exhausted by arith's training split), asked
so that they read differently from arith's: the model learns when to reach for the tool from the
question, not only from the tool list in the system prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from suites.arith import make_problem

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an integer arithmetic expression (+ - * // % ** and parentheses).",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}]
LEVELS = (2, 3, 4)


@dataclass(frozen=True)
class CalcEpisode:
    id: str
    level: int
    expression: str
    answer: int

    @property
    def question(self) -> str:
        return f"Use the calculator to compute {self.expression}."

    def messages(self) -> list[dict]:
        # The tool answers exactly what the sandboxed calculator prints for the expression.
        return [
            {"role": "user", "content": self.question},
            {"role": "assistant", "reasoning_content": "Pass the whole expression to the calculator.", "content": "",
             "tool_calls": [{"name": "calculate", "arguments": {"expression": self.expression}}]},
            {"role": "tool", "content": str(self.answer)},
            {"role": "assistant", "reasoning_content": "The calculator returned the result.",
             "content": f"The answer is {self.answer}."},
        ]


def generate(count: int, seed: int) -> list[CalcEpisode]:
    rng = random.Random(f"calc:{seed}")
    episodes = []
    for i in range(count):
        problem = make_problem(rng, LEVELS[i % len(LEVELS)], f"calc-{seed}-{i}")
        episodes.append(CalcEpisode(problem.id, problem.level, problem.expression, problem.answer))
    return episodes
