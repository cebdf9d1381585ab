"""`calc`: arithmetic solved with a calculator tool, one operation per call — tool-integrated reasoning.

The questions are arith's multi-step expressions (levels 2-3: level 1 is all but exhausted by arith's
training split). Instead of working each step in its head, the assistant sends it to `calculate`
and builds the next step on the tool's result, so the arithmetic is exact and what is left to the
model is tool use: taking each operation from the question and each result from the tool. One call
per step rather than the whole expression at once: the demo model copies a short "a op b" the way
its arith reasoning does, but not a nested expression (400 whole-expression episodes in SFT left it
at 0% success, every call with garbled operands). The questions read differently from arith's, so
the model learns when to reach for the tool from the question, not only from the tool list.
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
LEVELS = (2, 3)  # operations per expression, one calculator call each


@dataclass(frozen=True)
class CalcEpisode:
    id: str
    level: int
    expression: str
    steps: tuple[str, ...]  # "a op b = c", in the order the calls make them
    answer: int

    @property
    def question(self) -> str:
        return f"Use the calculator to compute {self.expression}."

    def messages(self) -> list[dict]:
        messages = [{"role": "user", "content": self.question}]
        for step in self.steps:
            operation, result = step.split(" = ")
            # The tool turn is exactly what the sandboxed calculator prints for the call.
            messages += [
                {"role": "assistant", "reasoning_content": "Calculate the next step.", "content": "",
                 "tool_calls": [{"name": "calculate", "arguments": {"expression": operation}}]},
                {"role": "tool", "content": result},
            ]
        messages.append({"role": "assistant", "reasoning_content": "The calculator returned the result.",
                         "content": f"The answer is {self.answer}."})
        return messages


def generate(count: int, seed: int) -> list[CalcEpisode]:
    rng = random.Random(f"calc:{seed}")
    episodes = []
    for i in range(count):
        problem = make_problem(rng, LEVELS[i % len(LEVELS)], f"calc-{seed}-{i}")
        episodes.append(CalcEpisode(problem.id, problem.level, problem.expression, problem.steps, problem.answer))
    return episodes
