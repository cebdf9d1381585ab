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
import re
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
QUESTION = re.compile(r"Use the calculator to compute (.+)\.")  # `CalcEpisode.question`: the expression


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
        # Each call's reasoning is arith's worked chain so far, ending in the operation the call sends
        # ("1 + 1 = 2\n2 - 2"), and the final reasoning is the whole chain: the steps read as arith's SFT
        # problems read, instead of a fixed "Calculate the next step." that says nothing about the operands.
        # Measured on the demo's SFT checkpoint: calc itself stays out of reach at this model size (0 of 60
        # sampled episodes succeed either way, 1 of 60 greedy with this), but the tool-call turns it teaches
        # are the ones search reuses: greedy held-out search success went 0 of 100 -> 20 of 100.
        messages = [{"role": "user", "content": self.question}]
        done: list[str] = []
        for step in self.steps:
            operation, result = step.split(" = ")
            # The tool turn is exactly what the sandboxed calculator prints for the call.
            messages += [
                {"role": "assistant", "reasoning_content": "\n".join([*done, operation]), "content": "",
                 "tool_calls": [{"name": "calculate", "arguments": {"expression": operation}}]},
                {"role": "tool", "content": result},
            ]
            done.append(step)
        messages.append({"role": "assistant", "reasoning_content": "\n".join(done),
                         "content": f"The answer is {self.answer}."})
        return messages


def generate(count: int, seed: int) -> list[CalcEpisode]:
    rng = random.Random(f"calc:{seed}")
    episodes = []
    for i in range(count):
        problem = make_problem(rng, LEVELS[i % len(LEVELS)], f"calc-{seed}-{i}")
        episodes.append(CalcEpisode(problem.id, problem.level, problem.expression, problem.steps, problem.answer))
    return episodes
