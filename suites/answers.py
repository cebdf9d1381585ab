"""The answer a reply states: arith, calc and search end with "The answer is X.", the code suite with its solution
in a fenced python block."""

from __future__ import annotations

import re

_STATED = re.compile(r"The answer is (.+)\.")
_INTEGER = re.compile(r"-?\d+")
# A block opens with ```python alone on its line and closes at the next ``` that starts a line.
_PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def stated_answer(reply: str) -> str | None:
    """X when the whole reply is "The answer is X.", else None."""
    match = _STATED.fullmatch(reply.strip())
    return match.group(1).strip() if match else None


def stated_integer(reply: str) -> int | None:
    """N when the whole reply is "The answer is N." with N an integer, else None."""
    answer = stated_answer(reply)
    return int(answer) if answer is not None and _INTEGER.fullmatch(answer) else None


def fenced_python(code: str) -> str:
    """A code reply: the solution as one fenced python block."""
    return f"```python\n{code.rstrip()}\n```"


def final_python_block(reply: str) -> str | None:
    """The code of the reply's last complete ```python block (the final answer, after any draft), None where the
    reply has none or only a blank one."""
    blocks = _PYTHON_BLOCK.findall(reply)
    return blocks[-1] if blocks and blocks[-1].strip() else None
