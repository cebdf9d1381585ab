"""chat@1: SFT conversations."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import json_list_of_objects, one_of
from data_contracts.contract import Contract
from data_contracts.fields import optional, required
from data_contracts.messages import CONVERSATION, conversation_checks

THINKING_MODES = ("interleaved", "preserved", "turn")

CHAT_V1 = Contract(
    name="chat",
    version=1,
    schema=pa.schema(
        [
            required("id", pa.string()),
            required("suite", pa.string()),
            required("split", pa.string()),
            required("thinking_mode", pa.string()),
            # OpenAI-style tool specs, kept as JSON text because their parameter schemas
            # are arbitrary JSON Schema that no fixed Arrow struct can hold.
            optional("tools_json", pa.string()),
            required("messages", CONVERSATION),
        ]
    ),
    checks=(
        one_of("thinking_mode", THINKING_MODES),
        json_list_of_objects("tools_json"),
        *conversation_checks("messages"),
    ),
)
