"""A Dockerfile's instructions, read without building it: (line, keyword, argument) each, continuation lines joined.

The Harbor import records a task's Dockerfile and does not build it; it reads it to see what the image would add
to this machine's system (data_prep/harbor_needs.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Instruction:
    line: int  # where it starts in the file
    keyword: str  # upper case: RUN, COPY, WORKDIR, ...
    argument: str  # the rest, continuation lines joined with a space

    def exec_form(self) -> list[str] | None:
        """The argument's words when written as a JSON array (`RUN ["a", "b"]`), else None (the shell form)."""
        if not self.argument.startswith("["):
            return None
        try:
            words = json.loads(self.argument)
        except json.JSONDecodeError:
            return None
        return [str(word) for word in words] if isinstance(words, list) else None


def instructions(text: str) -> list[Instruction]:
    """Docker's rules: `#` starts a comment line (also between continued lines), a line ending in `\\` goes on in
    the next one; empty lines are passed over."""
    found: list[Instruction] = []
    pending: tuple[int, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        continued = line.endswith("\\")
        part = line[:-1].strip() if continued else line
        pending = (pending[0], [*pending[1], part]) if pending else (number, [part])
        if not continued:
            found.append(_instruction(*pending))
            pending = None
    if pending:
        found.append(_instruction(*pending))
    return found


def _instruction(line: int, parts: list[str]) -> Instruction:
    keyword, _, argument = " ".join(parts).partition(" ")
    return Instruction(line, keyword.upper(), argument.strip())
