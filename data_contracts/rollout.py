"""rollout@1: one trained RL sample, token-aligned, as the stage that trained on it recorded it.

An agent episode's turns are one row while each turn extends the last (its environment tokens masked
out); the orchestrator starts a new row where context management rewrote the history. The columns
after `status` are filled by the stage that trains on the sample (stages/common/rollout_record.py) and
are null where they do not apply: no reward in distillation, no teacher outside it, no timings for a
sample from a batched request.
"""

from __future__ import annotations

import pyarrow as pa

from data_contracts.checks import at_least, at_most, json_object, non_decreasing, non_empty, one_of, same_length
from data_contracts.contract import Contract
from data_contracts.fields import list_of, optional, required

STATUSES = ("ok", "truncated", "env_error", "aborted")
REWARD_SCORE = pa.struct([required("module", pa.string()), optional("score", pa.float64())])

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
            # What the engine reported when it sampled each token (0 on environment tokens).
            required("rollout_logprobs", list_of(pa.float32())),
            # Policy versions that generated the response; several when a rollout spans
            # weight updates, which is what makes off-policy staleness measurable.
            required("weight_versions", list_of(pa.int64())),
            # The final (weighted) reward; null until the sample is scored.
            optional("reward", pa.float64()),
            required("status", pa.string()),
            optional("t_start", pa.float64()),
            optional("t_end", pa.float64()),
            optional("gen_seconds", pa.float64()),
            optional("env_seconds", pa.float64()),
            # The trained sample, as its stage recorded it.
            optional("stage", pa.string()),
            optional("step", pa.int64()),
            # The trainer's own logprobs of the response before the step's update (π_train at θ_old).
            optional("old_logprobs", list_of(pa.float32())),
            # Distillation: the teacher's logprob of every response token (0 where the mask is 0).
            optional("teacher_logprobs", list_of(pa.float32())),
            # Each reward module's own score (null: the module could not score it); in agentic RL the parts of
            # the reward: the task's success and, from a task that grades progress, its partial credit.
            optional("reward_scores", pa.list_(pa.field("item", REWARD_SCORE, nullable=False))),
            # What the reward modules were given besides the completion: {"messages", "reference",
            # "metadata"}, so a recorded module can score the sample again.
            optional("reward_input", pa.string()),
            optional("advantage", pa.float64()),
            # Weight pushes between the oldest weights that sampled it and the weights it trained.
            optional("staleness", pa.int64()),
            # The share of its trained tokens the IcePop / importance-sampling gate dropped.
            optional("masked_fraction", pa.float64()),
            # Where each turn the model generated begins in `response_ids`.
            optional("turn_starts", list_of(pa.int32())),
            # A reference reply trained as an off-policy group member (general RL's anchors).
            optional("anchor", pa.bool_()),
            # The experts the engine routed each position to, as SGLang returns them (meta_info.routed_experts:
            # base64 of int32 [prompt + response tokens - 1, num_hidden_layers, top_k], zeros on layers that do
            # not route); what routing replay trained through (model/routing.py). Null for a model without MoE.
            optional("routed_experts", pa.string()),
        ]
    ),
    token_columns=("prompt_ids", "response_ids", "loss_mask", "rollout_logprobs", "old_logprobs", "teacher_logprobs"),
    checks=(
        same_length("loss_mask", "response_ids"),
        same_length("rollout_logprobs", "response_ids"),
        same_length("old_logprobs", "response_ids"),
        same_length("teacher_logprobs", "response_ids"),
        one_of("loss_mask", (0, 1)),
        at_most("rollout_logprobs", 0.0),
        at_most("old_logprobs", 0.0),
        at_most("teacher_logprobs", 0.0),
        non_empty("weight_versions"),
        non_decreasing("weight_versions"),
        one_of("status", STATUSES),
        json_object("reward_input"),
        at_least("staleness", 0),
        at_least("masked_fraction", 0.0),
        at_most("masked_fraction", 1.0),
        non_decreasing("turn_starts"),
    ),
)
