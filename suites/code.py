"""`code`: write a small Python function, checked by hidden test calls run in the code sandbox.

Each problem comes from one of a few dozen templates (code_strings.py, code_numbers.py, code_lists.py) whose
parameters — separators, divisors, widths, which variant — and test inputs are drawn from the seed. The SFT
conversation is the task with one example call, a short plan as reasoning, and the solution as a fenced python
block; the RL prompt's reference carries the test calls (suites/code_cases.py), which the verifier
`rewards.verifiers.CodeTests` runs against the completion's final block.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from suites.answers import fenced_python
from suites.code_cases import DrawnTask, FunctionCases
from suites.code_lists import LIST_TEMPLATES
from suites.code_numbers import NUMBER_TEMPLATES
from suites.code_strings import STRING_TEMPLATES

TEMPLATES = (*STRING_TEMPLATES, *NUMBER_TEMPLATES, *LIST_TEMPLATES)


@dataclass(frozen=True)
class CodeProblem:
    id: str
    template: str
    drawn: DrawnTask

    @property
    def question(self) -> str:
        arguments, returns = self.drawn.calls[0]
        example = f"{self.drawn.function}({', '.join(map(repr, arguments))})"
        return (f"Write a Python function `{self.drawn.function}({self.drawn.parameters})` that {self.drawn.task}. "
                f"For example, `{example}` returns `{returns!r}`.")

    @property
    def reply(self) -> str:
        return fenced_python(self.drawn.solution)

    @property
    def reference(self) -> str:
        """The hidden test calls, as the prompt row's reference answer."""
        return self.cases().reference()

    def cases(self) -> FunctionCases:
        return self.drawn.cases()

    def messages(self) -> list[dict]:
        return [
            {"role": "user", "content": self.question},
            {"role": "assistant", "reasoning_content": self.drawn.plan, "content": self.reply},
        ]


def generate(count: int, seed: int) -> list[CodeProblem]:
    """`count` problems, the templates in turn (so any run of len(TEMPLATES) covers each once), each drawing its
    parameters from one stream: a longer run starts with a shorter one."""
    rng = random.Random(f"code:{seed}")
    problems = []
    for i in range(count):
        template = TEMPLATES[i % len(TEMPLATES)]
        problems.append(CodeProblem(f"code-{seed}-{i}", template.__name__, template(rng)))
    return problems
