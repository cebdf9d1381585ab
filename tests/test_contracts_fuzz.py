"""Random rows: valid ones round-trip exactly; one corrupted row is reported by column and row."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_contracts import CHAT_V1, ROLLOUT_V1, ContractError, read_parquet, write_parquet
from data_contracts.chat import THINKING_MODES
from data_contracts.messages import ROLES
from data_contracts.rollout import STATUSES

MAX_TOKENS = 8
# tmp_path is shared across examples on purpose (each writes its own file). too_slow is a
# timing heuristic about row generation, not about the code under test, and trips on busy machines.
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

TEXT = st.text(max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
TOKEN = st.integers(0, 2**31 - 1)
JSON_OBJECT = st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), TEXT, st.booleans()), max_size=3)


# Multiples of 1/1024 down to -976: exact in float32 (so the round trip compares equal) and drawn
# without the rejection sampling that bounded width-32 floats need.
LOGPROB = st.integers(-(10**6), 0).map(lambda steps: steps / 1024)


@st.composite
def rollout_rows(draw):
    length = draw(st.integers(1, MAX_TOKENS))

    def per_token(values):
        return draw(st.lists(values, min_size=length, max_size=length))

    return {
        "sample_id": draw(TEXT), "group_id": draw(TEXT), "session_id": draw(TEXT), "prompt_id": draw(TEXT),
        "task": draw(TEXT),
        "prompt_ids": draw(st.lists(TOKEN, min_size=1, max_size=MAX_TOKENS)),
        "response_ids": per_token(TOKEN),
        "loss_mask": per_token(st.sampled_from([0, 1])),
        "rollout_logprobs": per_token(LOGPROB),
        "weight_versions": sorted(draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=4))),
        "reward": draw(st.none() | FINITE),
        "status": draw(st.sampled_from(STATUSES)),
        "t_start": draw(FINITE), "t_end": draw(FINITE), "gen_seconds": draw(FINITE), "env_seconds": draw(FINITE),
        # What the training stage adds: any of it may be absent.
        "stage": draw(st.none() | TEXT), "step": draw(st.none() | st.integers(0, 2**40)),
        "old_logprobs": per_token(LOGPROB) if draw(st.booleans()) else None,
        "teacher_logprobs": per_token(LOGPROB) if draw(st.booleans()) else None,
        "reward_scores": draw(st.none() | st.lists(st.fixed_dictionaries({"module": TEXT, "score": st.none() | FINITE}),
                                                   max_size=3)),
        "reward_input": draw(st.none() | JSON_OBJECT.map(json.dumps)),
        "advantage": draw(st.none() | FINITE), "staleness": draw(st.none() | st.integers(0, 2**40)),
        "masked_fraction": draw(st.none() | st.floats(0.0, 1.0)),
        "turn_starts": draw(st.none() | st.lists(st.integers(0, length - 1), min_size=1, max_size=3).map(sorted)),
        "anchor": draw(st.none() | st.booleans()), "routed_experts": draw(st.none() | TEXT),
    }


TOOL_CALL = st.fixed_dictionaries({"name": TEXT, "arguments_json": JSON_OBJECT.map(json.dumps)})
MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(ROLES),
    "content": TEXT,
    "reasoning_content": st.none() | TEXT,
    "tool_calls": st.none() | st.lists(TOOL_CALL, max_size=2),
    "error": st.booleans(),
    "thinking": st.none() | st.booleans(),
})
CHAT_ROW = st.fixed_dictionaries({
    "id": TEXT, "suite": TEXT, "split": TEXT,
    "thinking_mode": st.sampled_from(THINKING_MODES),
    "tools_json": st.none() | st.lists(JSON_OBJECT, max_size=2).map(json.dumps),
    "messages": st.lists(MESSAGE, min_size=1, max_size=4),
})


def corrupt_rollout(draw, row):
    """Break ``row`` in one randomly chosen way; return the column the error must name."""
    kind = draw(st.sampled_from(["null", "non-finite", "mask length", "empty", "overlong"]))
    if kind == "null":
        column = draw(st.sampled_from([f.name for f in ROLLOUT_V1.schema if not f.nullable]))
        row[column] = None
    elif kind == "non-finite":
        bad = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        column = draw(st.sampled_from(["rollout_logprobs", "reward", "t_start", "t_end", "gen_seconds",
                                       "env_seconds"]))
        if column == "rollout_logprobs":
            position = draw(st.integers(0, len(row[column]) - 1))
            row[column] = row[column][:position] + [bad] + row[column][position + 1:]
        else:
            row[column] = bad
    elif kind == "mask length":
        column = "loss_mask"
        row[column] = row[column][:-1] if draw(st.booleans()) else row[column] + [1]
    elif kind == "empty":
        column = draw(st.sampled_from(["prompt_ids", "response_ids", "weight_versions"]))
        row[column] = []
    else:
        # An overlong response also mismatches its mask; the length limit is checked first.
        column = draw(st.sampled_from(["prompt_ids", "response_ids"]))
        row[column] = draw(st.lists(TOKEN, min_size=MAX_TOKENS + 1, max_size=MAX_TOKENS + 4))
    return column


def corrupt_chat(draw, row):
    """Break ``row`` in one randomly chosen way; return the column the error must name."""
    kind = draw(st.sampled_from(["null", "null in message", "empty", "role", "tool arguments"]))
    messages = [dict(m) for m in row["messages"]]
    position = draw(st.integers(0, len(messages) - 1))
    if kind == "null":
        column = draw(st.sampled_from([f.name for f in CHAT_V1.schema if not f.nullable]))
        row[column] = None
        return column
    if kind == "empty":
        row["messages"] = []
        return "messages"
    if kind == "null in message":
        field = draw(st.sampled_from(["role", "content", "error"]))
        messages[position][field] = None
        column = f"messages.{field}"
    elif kind == "role":
        messages[position]["role"] = draw(TEXT.filter(lambda role: role not in ROLES))
        column = "messages.role"
    else:
        arguments = draw(st.sampled_from(["", "{", "[]", "null", "1", '"text"']))
        messages[position]["tool_calls"] = [{"name": "f", "arguments_json": arguments}]
        column = "messages.tool_calls.arguments_json"
    row["messages"] = messages
    return column


@FUZZ
@given(rows=st.lists(rollout_rows(), max_size=5))
def test_valid_rollouts_round_trip(tmp_path, rows):
    path = tmp_path / f"{uuid.uuid4().hex}.parquet"
    assert write_parquet(ROLLOUT_V1, rows, path, max_tokens=MAX_TOKENS) == len(rows)
    assert read_parquet(ROLLOUT_V1, path, max_tokens=MAX_TOKENS).to_pylist() == rows


@FUZZ
@given(rows=st.lists(CHAT_ROW, max_size=5))
def test_valid_chats_round_trip(tmp_path, rows):
    path = tmp_path / f"{uuid.uuid4().hex}.parquet"
    assert write_parquet(CHAT_V1, rows, path) == len(rows)
    assert read_parquet(CHAT_V1, path).to_pylist() == rows


@pytest.mark.parametrize(
    ("contract", "valid_row", "corrupt"),
    [(ROLLOUT_V1, rollout_rows(), corrupt_rollout), (CHAT_V1, CHAT_ROW, corrupt_chat)],
    ids=["rollout", "chat"],
)
@FUZZ
@given(data=st.data())
def test_corrupted_row_is_located(tmp_path, contract, valid_row, corrupt, data):
    rows = data.draw(st.lists(valid_row, min_size=1, max_size=5))
    bad_row = data.draw(st.integers(0, len(rows) - 1))
    column = corrupt(data.draw, rows[bad_row])
    path = tmp_path / f"{uuid.uuid4().hex}.parquet"
    with pytest.raises(ContractError) as caught:
        write_parquet(contract, rows, path, max_tokens=MAX_TOKENS)
    assert (caught.value.file, caught.value.column, caught.value.row) == (str(path), column, bad_row)
    assert not path.exists()
