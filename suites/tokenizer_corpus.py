"""The embedded suites' conversations, the default tokenizer's training text (model/tokenizer.py takes it
as an argument: the model layer knows nothing of the suites)."""

from __future__ import annotations

from collections.abc import Iterator

from suites import arith, search

CORPUS_SEED = 1234
CORPUS_SIZE = 3000


def suite_conversations(size: int = CORPUS_SIZE, seed: int = CORPUS_SEED) -> Iterator[tuple[list[dict], list | None]]:
    """The embedded suites' conversations (messages, tools) the default tokenizer is trained on."""
    for problem in arith.generate(size, seed):
        yield problem.messages(), None
    for episode in search.generate(size // 4, seed):
        yield list(episode.messages), search.TOOLS
