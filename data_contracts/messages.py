"""The chat message struct shared by the chat, prompt and preference contracts."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import Check, json_object, non_empty, one_of
from data_contracts.fields import list_of, optional, required

ROLES = ("system", "user", "assistant", "tool")

TOOL_CALL = pa.struct(
    [
        required("name", pa.string()),
        required("arguments_json", pa.string()),
    ]
)

MESSAGE = pa.struct(
    [
        required("role", pa.string()),
        # May be empty: an assistant turn that only calls tools has no text.
        required("content", pa.string()),
        optional("reasoning_content", pa.string()),
        optional("tool_calls", list_of(TOOL_CALL)),
        # An erroneous turn stays in the context the model sees but gets loss mask 0.
        required("error", pa.bool_()),
        # Turn-level thinking on/off for assistant turns; null where it does not apply.
        optional("thinking", pa.bool_()),
    ]
)

CONVERSATION = list_of(MESSAGE)


def conversation_checks(column: str) -> tuple[Check, ...]:
    """Checks for a CONVERSATION column: at least one message, known roles, tool arguments are objects."""
    return (
        non_empty(column),
        one_of(f"{column}.role", ROLES),
        json_object(f"{column}.tool_calls.arguments_json"),
    )
