"""prompt@1: RL prompts."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import json_object
from data_contracts.contract import Contract
from data_contracts.fields import optional, required
from data_contracts.messages import CONVERSATION, conversation_checks

PROMPT_V1 = Contract(
    name="prompt",
    version=1,
    schema=pa.schema(
        [
            required("id", pa.string()),
            required("domain", pa.string()),
            required("source", pa.string()),
            required("messages", CONVERSATION),
            # Null for prompts graded without a reference (e.g. by a reward model).
            optional("reference_answer", pa.string()),
            optional("metadata_json", pa.string()),
        ]
    ),
    checks=(
        *conversation_checks("messages"),
        json_object("metadata_json"),
    ),
)
