"""`calc`: arithmetic the model cannot do in its head, solved with a calculator tool.

Operands have two digits, so the products and sums are beyond what the demo model computes (arith's
single-digit steps are); the assistant passes the expression to `calculate` and states what the tool
returned. The skill is tool use itself: copying the expression into the call and the result into the
reply. The questions read differently from arith's, so the model learns when to reach for the tool
from the question, not only from the tool list in the system prompt.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an integer arithmetic expression (+ - * // % ** and parentheses).",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}]
LEVELS = (1, 2)  # operations per expression
OPERANDS = (10, 99)
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


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


def make_episode(rng: random.Random, level: int, episode_id: str) -> CalcEpisode:
    value = rng.randint(*OPERANDS)
    expression = str(value)
    for step in range(level):
        symbol, operand = rng.choice(sorted(OPERATORS)), rng.randint(*OPERANDS)
        value = OPERATORS[symbol](value, operand)
        # Parenthesised so the written expression evaluates in the order it was built.
        expression = f"({expression} {symbol} {operand})" if step < level - 1 else f"{expression} {symbol} {operand}"
    return CalcEpisode(episode_id, level, expression, value)


def generate(count: int, seed: int) -> list[CalcEpisode]:
    rng = random.Random(f"calc:{seed}")
    return [make_episode(rng, LEVELS[i % len(LEVELS)], f"calc-{seed}-{i}") for i in range(count)]
