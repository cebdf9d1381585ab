"""The embedded suites as `chat@1` rows with held-out splits: what `posttrain demo` publishes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from data_contracts.conversation import message_record
from suites import arith, search


@dataclass(frozen=True)
class SuiteSizes:
    train: int = 2000
    test: int = 500


def chat_row(conversation_id: str, suite: str, split: str, messages, tools=None, thinking_mode="interleaved") -> dict:
    return {
        "id": conversation_id,
        "suite": suite,
        "split": split,
        "thinking_mode": thinking_mode,
        "tools_json": json.dumps(tools, ensure_ascii=False) if tools else None,
        "messages": [message_record(message) for message in messages],
    }


def arith_rows(split: str, count: int, seed: int) -> list[dict]:
    # Splits use different seeds, so held-out problems are drawn independently of training ones.
    split_seed = seed * 2 + (split == "test")
    return [chat_row(p.id, "arith", split, p.messages()) for p in arith.generate(count, split_seed)]


def search_rows(split: str, count: int, seed: int) -> list[dict]:
    split_seed = seed * 2 + (split == "test")
    return [
        chat_row(e.id, "search", split, e.messages, search.TOOLS) for e in search.generate(count, split_seed)
    ]


SUITES = {"arith": arith_rows, "search": search_rows}


def suite_splits(suite: str, sizes: SuiteSizes, seed: int) -> dict[str, list[dict]]:
    make_rows = SUITES[suite]
    return {"train": make_rows("train", sizes.train, seed), "test": make_rows("test", sizes.test, seed)}
