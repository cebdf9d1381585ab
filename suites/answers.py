"""The answer a reply states: both suites end with "The answer is X."."""

from __future__ import annotations

import re

_STATED = re.compile(r"The answer is (.+)\.")
_INTEGER = re.compile(r"-?\d+")


def stated_answer(reply: str) -> str | None:
    """X when the whole reply is "The answer is X.", else None."""
    match = _STATED.fullmatch(reply.strip())
    return match.group(1).strip() if match else None


def stated_integer(reply: str) -> int | None:
    """N when the whole reply is "The answer is N." with N an integer, else None."""
    answer = stated_answer(reply)
    return int(answer) if answer is not None and _INTEGER.fullmatch(answer) else None
