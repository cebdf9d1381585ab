"""Between chat messages as the renderer takes them and the message struct the contracts store.

In a record, tool-call arguments are a JSON string (Arrow has no free-form map) and turn-level
thinking is a flag; as messages, arguments are a dict and a thinking-off turn simply has no reasoning,
which is exactly how GLM-5's template renders it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping


def message_record(message: Mapping) -> dict:
    calls = message.get("tool_calls")
    return {
        "role": message["role"],
        "content": message.get("content") or "",
        "reasoning_content": message.get("reasoning_content"),
        "tool_calls": None if calls is None else [
            {"name": call["name"], "arguments_json": json.dumps(call["arguments"], ensure_ascii=False, sort_keys=True)}
            for call in calls
        ],
        "error": bool(message.get("error", False)),
        "thinking": message.get("thinking"),
    }


def messages_from_records(records: Iterable[Mapping]) -> list[dict]:
    messages = []
    for record in records:
        message = {"role": record["role"], "content": record["content"]}
        if record.get("reasoning_content") is not None and record.get("thinking") is not False:
            message["reasoning_content"] = record["reasoning_content"]
        if record.get("tool_calls"):
            message["tool_calls"] = [
                {"name": call["name"], "arguments": json.loads(call["arguments_json"])} for call in record["tool_calls"]
            ]
        if record.get("error"):
            message["error"] = True
        messages.append(message)
    return messages
