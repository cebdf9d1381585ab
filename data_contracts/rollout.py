"""rollout@1: one trained RL sample, token-aligned."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import at_most, non_decreasing, non_empty, one_of, same_length
from data_contracts.contract import Contract
from data_contracts.fields import list_of, optional, required

STATUSES = ("ok", "truncated", "env_error", "aborted")

ROLLOUT_V1 = Contract(
    name="rollout",
    version=1,
    schema=pa.schema(
        [
            required("sample_id", pa.string()),
            required("group_id", pa.string()),
            required("session_id", pa.string()),
            required("prompt_id", pa.string()),
            required("task", pa.string()),
            required("prompt_ids", list_of(pa.int32())),
            required("response_ids", list_of(pa.int32())),
            required("loss_mask", list_of(pa.int8())),
            required("rollout_logprobs", list_of(pa.float32())),
            # Policy versions that generated the response; several when a rollout spans
            # weight updates, which is what makes off-policy staleness measurable.
            required("weight_versions", list_of(pa.int64())),
            # Null until the sample is scored.
            optional("reward", pa.float64()),
            required("status", pa.string()),
            required("t_start", pa.float64()),
            required("t_end", pa.float64()),
            required("gen_seconds", pa.float64()),
            required("env_seconds", pa.float64()),
        ]
    ),
    token_columns=("prompt_ids", "response_ids", "loss_mask", "rollout_logprobs"),
    checks=(
        same_length("loss_mask", "response_ids"),
        same_length("rollout_logprobs", "response_ids"),
        one_of("loss_mask", (0, 1)),
        at_most("rollout_logprobs", 0.0),
        non_empty("weight_versions"),
        non_decreasing("weight_versions"),
        one_of("status", STATUSES),
    ),
)
