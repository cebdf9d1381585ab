"""What a chat@1 row asks (the conversation before the first assistant turn) and what it expects."""

from __future__ import annotations

import json
from collections.abc import Mapping

from data_contracts.conversation import messages_from_records
from suites.answers import stated_answer


def prompt_messages(row: Mapping) -> tuple[dict, ...]:
    messages = messages_from_records(row["messages"])
    first_reply = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    return tuple(messages[:first_reply])


def row_tools(row: Mapping) -> list[dict] | None:
    return json.loads(row["tools_json"]) if row.get("tools_json") else None


def reference_answer(row: Mapping) -> str:
    """The answer the row's last assistant reply states; a row without one cannot be scored."""
    replies = [m for m in row["messages"] if m["role"] == "assistant"]
    answer = stated_answer(replies[-1]["content"]) if replies else None
    if answer is None:
        raise ValueError(f"row {row['id']}: no reference reply of the form 'The answer is X.'")
    return answer
