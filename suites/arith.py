"""`arith`: multi-step integer arithmetic with a step-by-step reasoning trace and a verifiable answer.

Difficulty is the number of operations (levels 1-4), so RL has headroom above what SFT reaches.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

OPERATORS = ("+", "-", "*")
# Single-digit operands keep every step a fact a 1M-parameter model learns in minutes; difficulty
# comes from chaining steps (level 1 is near-certain after SFT, level 4 leaves headroom for RL).
OPERANDS = (1, 9)
MULTIPLIERS = (2, 5)
# Multiplying only small values keeps intermediate results at two digits (three at most).
MULTIPLY_BELOW = 20


@dataclass(frozen=True)
class ArithProblem:
    id: str
    level: int
    expression: str
    steps: tuple[str, ...]
    answer: int

    def messages(self) -> list[dict]:
        return [
            {"role": "user", "content": f"Compute {self.expression}."},
            {
                "role": "assistant",
                "reasoning_content": "\n".join(self.steps),
                "content": f"The answer is {self.answer}.",
            },
        ]


def _apply(left: int, op: str, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    return left * right


def make_problem(rng: random.Random, level: int, problem_id: str) -> ArithProblem:
    value = rng.randint(*OPERANDS)
    expression = str(value)
    steps = []
    for _ in range(level):
        op = rng.choice(OPERATORS if abs(value) <= MULTIPLY_BELOW else ("+", "-"))
        operand = rng.randint(*MULTIPLIERS) if op == "*" else rng.randint(*OPERANDS)
        result = _apply(value, op, operand)
        steps.append(f"{value} {op} {operand} = {result}")
        # Parenthesise so the written expression evaluates in the order the trace does.
        expression = f"({expression} {op} {operand})" if len(steps) < level else f"{expression} {op} {operand}"
        value = result
    return ArithProblem(problem_id, level, expression, tuple(steps), value)


def worked_steps(expression: str) -> list[str]:
    """The steps `make_problem` wrote for its left-nested expression ("((5 + 3) * 2) - 4")."""
    terms = expression.replace("(", "").replace(")", "").split()
    value, steps = int(terms[0]), []
    for op, operand in zip(terms[1::2], terms[2::2], strict=True):
        result = _apply(value, op, int(operand))
        steps.append(f"{value} {op} {operand} = {result}")
        value = result
    return steps


def generate(count: int, seed: int, levels: tuple[int, ...] = (1, 2, 3, 4)) -> list[ArithProblem]:
    rng = random.Random(f"arith:{seed}")
    return [make_problem(rng, levels[i % len(levels)], f"arith-{seed}-{i}") for i in range(count)]
