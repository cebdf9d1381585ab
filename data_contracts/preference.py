"""preference@1: chosen/rejected completion pairs for one prompt."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.contract import Contract
from data_contracts.fields import required
from data_contracts.messages import CONVERSATION, conversation_checks

PREFERENCE_V1 = Contract(
    name="preference",
    version=1,
    schema=pa.schema(
        [
            required("id", pa.string()),
            required("domain", pa.string()),
            required("prompt", CONVERSATION),
            required("chosen", pa.string()),
            required("rejected", pa.string()),
            required("source", pa.string()),
        ]
    ),
    checks=conversation_checks("prompt"),
)
