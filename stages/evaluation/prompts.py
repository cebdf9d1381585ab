"""What an evaluator asks and the one function type it asks through, free of torch so services can import it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    messages: tuple[dict, ...]
    tools: list[dict] | None
    enable_thinking: bool


# The text generated after each prompt's generation prompt, through the stop token if one came.
GenerateTurns = Callable[[Sequence[Prompt]], list[str]]
