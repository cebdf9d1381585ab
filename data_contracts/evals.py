"""eval@1: one metric of one checkpoint on one suite split."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import at_least
from data_contracts.contract import Contract
from data_contracts.fields import required

EVAL_V1 = Contract(
    name="eval",
    version=1,
    schema=pa.schema(
        [
            required("checkpoint_uri", pa.string()),
            required("suite", pa.string()),
            required("metric", pa.string()),
            required("split", pa.string()),
            required("value", pa.float64()),
            # Number of examples the metric was computed over.
            required("n", pa.int64()),
            required("created_at", pa.string()),
        ]
    ),
    checks=(at_least("n", 0),),
)
