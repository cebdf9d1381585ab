"""Contracts: round trips, one precise error per kind of violation, atomic writes, readable output."""

from __future__ import annotations

import json
import math

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_contracts import (
    CHAT_V1,
    CONTRACT_METADATA_KEY,
    EVAL_V1,
    PREFERENCE_V1,
    PROMPT_V1,
    ROLLOUT_V1,
    ContractError,
    get_contract,
    read_parquet,
    validate_table,
    write_parquet,
)


def message(role="user", content="hello", **fields):
    return {"role": role, "content": content, "reasoning_content": None, "tool_calls": None, "error": False,
            "thinking": None, **fields}


def tool_call(name="search", arguments_json='{"query": "x"}'):
    return {"name": name, "arguments_json": arguments_json}


def chat_row(i):
    return {
        "id": f"chat-{i}", "suite": "sft-mix", "split": "train", "thinking_mode": "interleaved",
        "tools_json": json.dumps([{"type": "function", "function": {"name": "search", "parameters": {}}}]),
        "messages": [
            message("system", "be brief"),
            message("user", "find x"),
            message("assistant", "", reasoning_content="look it up", tool_calls=[tool_call()], thinking=True),
            message("tool", "x is 1", error=True),
            message("assistant", "x is 1", thinking=False),
        ],
    }


def prompt_row(i):
    return {"id": f"prompt-{i}", "domain": "math", "source": "gsm8k", "messages": [message("user", "1+1?")],
            "reference_answer": "2" if i % 2 else None, "metadata_json": '{"difficulty": 1}'}


def rollout_row(i):
    return {
        "sample_id": f"s{i}", "group_id": "g0", "session_id": f"sess{i}", "prompt_id": "p0", "task": "math",
        "prompt_ids": [1, 2, 3], "response_ids": [4, 5, 6, 7], "loss_mask": [1, 1, 0, 1],
        "rollout_logprobs": [-0.5, -0.25, 0.0, -1.0], "weight_versions": [3, 3, 4],
        "reward": 1.0 if i % 2 else None, "status": "ok",
        "t_start": 10.0, "t_end": 12.5, "gen_seconds": 2.0, "env_seconds": 0.5,
        # What the stage that trained on it records.
        "stage": "agentic_rl", "step": 7, "old_logprobs": [-0.5, -0.5, -2.0, -1.0], "teacher_logprobs": None,
        "reward_scores": [{"module": "exact", "score": 1.0}, {"module": "judge", "score": None}],
        "reward_input": '{"prompt": [], "reference": "4", "metadata": {}}', "advantage": 0.5 if i % 2 else -0.5,
        "staleness": 1, "masked_fraction": 1 / 3, "turn_starts": [0, 3], "anchor": False, "routed_experts": None,
    }


def preference_row(i):
    return {"id": f"pref-{i}", "domain": "chat", "prompt": [message("user", "hi")], "chosen": "hello!",
            "rejected": "go away", "source": "ultrafeedback"}


def eval_row(i):
    return {"checkpoint_uri": "s3://ckpt/step-100", "suite": "gsm8k", "metric": "accuracy", "split": "test",
            "value": 0.5, "n": 200 + i, "created_at": "2025-01-01T00:00:00Z"}


ROW_BUILDERS = {CHAT_V1: chat_row, PROMPT_V1: prompt_row, ROLLOUT_V1: rollout_row, PREFERENCE_V1: preference_row,
                EVAL_V1: eval_row}


def rows_of(contract, count=3):
    return [ROW_BUILDERS[contract](i) for i in range(count)]


def with_row(rows, index, **changes):
    rows = [dict(row) for row in rows]
    rows[index].update(changes)
    return rows


def with_message(rows, index, position, **changes):
    rows = [dict(row) for row in rows]
    messages = [dict(m) for m in rows[index]["messages"]]
    messages[position].update(changes)
    rows[index]["messages"] = messages
    return rows


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("contract", list(ROW_BUILDERS), ids=lambda c: c.id)
def test_round_trip(tmp_path, contract):
    path = tmp_path / f"{contract.name}.parquet"
    rows = rows_of(contract)
    assert write_parquet(contract, rows, path) == 3
    table = read_parquet(contract, path)
    assert table.schema == contract.schema
    assert table.to_pylist() == rows
    assert pq.read_schema(path).metadata[CONTRACT_METADATA_KEY] == contract.id.encode()


@pytest.mark.parametrize("contract", list(ROW_BUILDERS), ids=lambda c: c.id)
def test_get_contract_by_id(contract):
    assert get_contract(f"{contract.name}@{contract.version}") is contract
    assert contract.id == f"{contract.name}@1"


def test_unknown_contract_lists_known_ids():
    with pytest.raises(KeyError, match="chat@1"):
        get_contract("chat@2")


BAD_TOKENS_MAX = 6

# (contract, rows whose row 1 is bad, column the error must name)
VIOLATIONS = {
    "null in required column": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, task=None), "task"),
    "missing required key": (EVAL_V1, [eval_row(0), {k: v for k, v in eval_row(1).items() if k != "metric"}],
                             "metric"),
    "null in required message field": (CHAT_V1, with_message(rows_of(CHAT_V1), 1, 2, content=None),
                                       "messages.content"),
    "null in required tool call field": (CHAT_V1, with_message(rows_of(CHAT_V1), 1, 2, tool_calls=[tool_call(None)]),
                                         "messages.tool_calls.name"),
    "null token": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, prompt_ids=[1, None]), "prompt_ids"),
    "empty token list": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, prompt_ids=[]), "prompt_ids"),
    "overlong token list": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, prompt_ids=[1] * (BAD_TOKENS_MAX + 1)),
                            "prompt_ids"),
    "NaN in float column": (EVAL_V1, with_row(rows_of(EVAL_V1), 1, value=math.nan), "value"),
    "inf in nullable float column": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, reward=-math.inf), "reward"),
    "NaN inside float list": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, rollout_logprobs=[-1.0, math.nan, 0, 0]),
                              "rollout_logprobs"),
    "loss mask shorter than response": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, loss_mask=[1, 1, 1]),
                                        "loss_mask"),
    "logprobs longer than response": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, rollout_logprobs=[0.0] * 5),
                                      "rollout_logprobs"),
    "loss mask not 0/1": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, loss_mask=[1, 2, 0, 1]), "loss_mask"),
    "positive logprob": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, rollout_logprobs=[-1.0, 0.5, 0, 0]),
                         "rollout_logprobs"),
    "empty weight versions": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, weight_versions=[]), "weight_versions"),
    "decreasing weight versions": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, weight_versions=[4, 3]),
                                   "weight_versions"),
    "unknown status": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, status="done"), "status"),
    "trainer logprobs shorter than response": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, old_logprobs=[-1.0]),
                                               "old_logprobs"),
    "masked fraction above 1": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, masked_fraction=1.5), "masked_fraction"),
    "reward input not JSON": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, reward_input="{prompt"), "reward_input"),
    "turns out of order": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, turn_starts=[3, 0]), "turn_starts"),
    "unknown thinking mode": (CHAT_V1, with_row(rows_of(CHAT_V1), 1, thinking_mode="always"), "thinking_mode"),
    "no messages": (CHAT_V1, with_row(rows_of(CHAT_V1), 1, messages=[]), "messages"),
    "unknown role": (CHAT_V1, with_message(rows_of(CHAT_V1), 1, 0, role="developer"), "messages.role"),
    "tool arguments not JSON": (CHAT_V1, with_message(rows_of(CHAT_V1), 1, 2, tool_calls=[tool_call("f", "{x")]),
                                "messages.tool_calls.arguments_json"),
    "tool arguments not an object": (PROMPT_V1,
                                     with_message(rows_of(PROMPT_V1), 1, 0, tool_calls=[tool_call("f", "[1]")]),
                                     "messages.tool_calls.arguments_json"),
    "tools not a list": (CHAT_V1, with_row(rows_of(CHAT_V1), 1, tools_json='{"type": "function"}'), "tools_json"),
    "metadata not an object": (PROMPT_V1, with_row(rows_of(PROMPT_V1), 1, metadata_json='"easy"'), "metadata_json"),
    "negative count": (EVAL_V1, with_row(rows_of(EVAL_V1), 1, n=-1), "n"),
    "empty preference prompt": (PREFERENCE_V1, with_row(rows_of(PREFERENCE_V1), 1, prompt=[]), "prompt"),
    "string where int expected": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, response_ids=["4", 5, 6, 7]),
                                  "response_ids"),
    # pyarrow would silently store 1.5 as 1.
    "float where int expected": (ROLLOUT_V1, with_row(rows_of(ROLLOUT_V1), 1, response_ids=[4, 5.5, 6, 7]),
                                 "response_ids"),
    "int overflow": (EVAL_V1, with_row(rows_of(EVAL_V1), 1, n=2**63), "n"),
    "misspelt column": (PROMPT_V1, [prompt_row(0), {**prompt_row(1), "metadata": "{}"}], "metadata"),
}


@pytest.mark.parametrize("case", list(VIOLATIONS))
def test_violation_names_file_column_and_row(tmp_path, case):
    contract, rows, column = VIOLATIONS[case]
    path = tmp_path / "out.parquet"
    with pytest.raises(ContractError) as caught:
        write_parquet(contract, rows, path, max_tokens=BAD_TOKENS_MAX)
    error = caught.value
    assert (error.file, error.column, error.row) == (str(path), column, 1)
    assert str(error).startswith(f"{path}: column '{column}', row 1: ")
    assert leftovers(tmp_path) == []


def test_token_limit_is_inclusive(tmp_path):
    rows = with_row(rows_of(ROLLOUT_V1), 0, prompt_ids=[1] * BAD_TOKENS_MAX)
    assert write_parquet(ROLLOUT_V1, rows, tmp_path / "ok.parquet", max_tokens=BAD_TOKENS_MAX) == 3


def test_first_bad_row_is_reported(tmp_path):
    rows = rows_of(ROLLOUT_V1, 5)
    rows = with_row(with_row(rows, 3, status="bad"), 4, status="worse")
    with pytest.raises(ContractError) as caught:
        write_parquet(ROLLOUT_V1, rows, tmp_path / "out.parquet")
    assert caught.value.row == 3


def test_row_that_is_not_a_mapping(tmp_path):
    with pytest.raises(ContractError) as caught:
        write_parquet(EVAL_V1, [eval_row(0), ("not", "a", "dict")], tmp_path / "out.parquet")
    assert (caught.value.column, caught.value.row) == (None, 1)


def test_failed_write_keeps_existing_file(tmp_path):
    path = tmp_path / "rollouts.parquet"
    good = rows_of(ROLLOUT_V1)
    write_parquet(ROLLOUT_V1, good, path)
    before = path.read_bytes()
    with pytest.raises(ContractError):
        write_parquet(ROLLOUT_V1, with_row(good, 2, loss_mask=[1]), path)
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == ["rollouts.parquet"]


def test_successful_write_replaces_existing_file(tmp_path):
    path = tmp_path / "evals.parquet"
    write_parquet(EVAL_V1, rows_of(EVAL_V1, 2), path)
    write_parquet(EVAL_V1, rows_of(EVAL_V1, 5), path)
    assert read_parquet(EVAL_V1, path).num_rows == 5
    assert leftovers(tmp_path) == ["evals.parquet"]


def test_rows_may_be_any_iterable(tmp_path):
    assert write_parquet(EVAL_V1, (eval_row(i) for i in range(4)), tmp_path / "evals.parquet") == 4


def test_nullable_in_memory_table_is_written_with_exact_schema(tmp_path):
    # Tables built without the contract schema are all-nullable; that alone is not a mismatch.
    loose_schema = pa.schema([field.with_nullable(True) for field in ROLLOUT_V1.schema])
    loose = pa.Table.from_pylist(rows_of(ROLLOUT_V1), schema=loose_schema)
    path = tmp_path / "rollouts.parquet"
    assert write_parquet(ROLLOUT_V1, loose, path) == 3
    assert read_parquet(ROLLOUT_V1, path).schema == ROLLOUT_V1.schema


def test_validate_table_returns_contract_schema():
    loose = pa.Table.from_pylist(rows_of(EVAL_V1), schema=pa.schema([f.with_nullable(True) for f in EVAL_V1.schema]))
    assert validate_table(EVAL_V1, loose, source="in-memory evals").schema == EVAL_V1.schema


def test_validate_table_names_the_source():
    table = pa.Table.from_pylist(with_row(rows_of(EVAL_V1), 2, value=math.inf), schema=EVAL_V1.schema)
    with pytest.raises(ContractError, match=r"^in-memory evals: column 'value', row 2: "):
        validate_table(EVAL_V1, table, source="in-memory evals")


def eval_table(**replacements):
    table = pa.Table.from_pylist(rows_of(EVAL_V1), schema=EVAL_V1.schema)
    for name, array in replacements.items():
        table = table.set_column(table.schema.get_field_index(name), name, array)
    return table


SCHEMA_MISMATCHES = {
    "wrong type": (eval_table(n=pa.array([1, 2, 3], pa.int32())), "n"),
    "missing column": (eval_table().drop_columns(["created_at"]), "created_at"),
    "extra column": (eval_table().append_column("note", pa.array(["a", "b", "c"])), "note"),
    "columns out of order": (eval_table().select(["suite", "checkpoint_uri", "metric", "split", "value", "n",
                                                  "created_at"]), "checkpoint_uri"),
    "first of two mismatches": (eval_table(value=pa.array([1, 2, 3]), n=pa.array([1.0, 2.0, 3.0])), "value"),
}


@pytest.mark.parametrize("case", list(SCHEMA_MISMATCHES))
def test_table_schema_mismatch_names_first_column(tmp_path, case):
    table, column = SCHEMA_MISMATCHES[case]
    path = tmp_path / "evals.parquet"
    with pytest.raises(ContractError, match=rf"^{path}: column '{column}': ") as caught:
        write_parquet(EVAL_V1, table, path)
    assert (caught.value.column, caught.value.row) == (column, None)
    assert leftovers(tmp_path) == []


def test_nested_type_mismatch_is_caught(tmp_path):
    loose_message = pa.struct([("role", pa.string()), ("content", pa.string())])
    table = pa.Table.from_pylist(
        [{"id": "p", "domain": "d", "source": "s", "messages": [{"role": "user", "content": "x"}],
          "reference_answer": None, "metadata_json": None}],
        schema=pa.schema([f if f.name != "messages" else pa.field("messages", pa.list_(loose_message))
                          for f in PROMPT_V1.schema]),
    )
    with pytest.raises(ContractError) as caught:
        write_parquet(PROMPT_V1, table, tmp_path / "prompts.parquet")
    assert caught.value.column == "messages"


def test_read_validates_values(tmp_path):
    # A file written by another tool, bypassing write_parquet's checks.
    path = tmp_path / "rollouts.parquet"
    table = pa.Table.from_pylist(with_row(rows_of(ROLLOUT_V1, 4), 3, weight_versions=[5, 1]), schema=ROLLOUT_V1.schema)
    pq.write_table(table, path)
    with pytest.raises(ContractError) as caught:
        read_parquet(ROLLOUT_V1, path)
    assert (caught.value.file, caught.value.column, caught.value.row) == (str(path), "weight_versions", 3)


def test_read_accepts_unstamped_valid_file(tmp_path):
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows_of(PROMPT_V1), schema=PROMPT_V1.schema), path)
    assert read_parquet(PROMPT_V1, path).to_pylist() == rows_of(PROMPT_V1)


def test_read_refuses_file_of_another_contract(tmp_path):
    path = tmp_path / "prompts.parquet"
    write_parquet(PROMPT_V1, rows_of(PROMPT_V1), path)
    with pytest.raises(ContractError, match="written as prompt@1, not chat@1") as caught:
        read_parquet(CHAT_V1, path)
    assert (caught.value.file, caught.value.column, caught.value.row) == (str(path), None, None)


def test_read_refuses_other_version_with_identical_columns(tmp_path):
    path = tmp_path / "evals.parquet"
    table = pa.Table.from_pylist(rows_of(EVAL_V1), schema=EVAL_V1.schema)
    pq.write_table(table.replace_schema_metadata({CONTRACT_METADATA_KEY: b"eval@2"}), path)
    with pytest.raises(ContractError, match="eval@2"):
        read_parquet(EVAL_V1, path)


def test_read_refuses_non_parquet(tmp_path):
    path = tmp_path / "evals.parquet"
    path.write_text("id,value\n1,2\n")
    with pytest.raises(ContractError, match="not a readable Parquet file"):
        read_parquet(EVAL_V1, path)


def test_token_columns_are_not_dictionary_encoded(tmp_path):
    path = tmp_path / "rollouts.parquet"
    write_parquet(ROLLOUT_V1, rows_of(ROLLOUT_V1), path)
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {}
    for index in range(row_group.num_columns):
        chunk = row_group.column(index)
        assert chunk.compression == "SNAPPY"
        encodings[chunk.path_in_schema.split(".")[0]] = chunk.encodings
    for field in ROLLOUT_V1.schema:
        if pa.types.is_boolean(field.type):
            continue  # Parquet bit-packs booleans; it has no dictionary encoding for them
        dictionary_encoded = "RLE_DICTIONARY" in encodings[field.name]
        assert dictionary_encoded == (field.name not in ROLLOUT_V1.token_columns), field.name


def test_nested_non_token_columns_are_dictionary_encoded(tmp_path):
    path = tmp_path / "chat.parquet"
    write_parquet(CHAT_V1, rows_of(CHAT_V1), path)
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {row_group.column(i).path_in_schema: row_group.column(i).encodings
                 for i in range(row_group.num_columns)}
    assert "RLE_DICTIONARY" in encodings["messages.list.element.role"]


@pytest.mark.parametrize("contract", list(ROW_BUILDERS), ids=lambda c: c.id)
def test_datasets_loads_written_files(tmp_path, contract):
    path = tmp_path / f"{contract.name}.parquet"
    rows = rows_of(contract)
    write_parquet(contract, rows, path)
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == 3
    assert loaded.to_list() == rows


def token_table(rows, tokens_per_row, chunks):
    """A rollout table of ``rows`` rows built straight from numpy, in ``chunks`` chunks."""
    total = rows * tokens_per_row

    def token_lists(values):
        offsets = pa.array(np.arange(0, total + 1, tokens_per_row, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, values).cast(ROLLOUT_V1.schema.field("prompt_ids").type)

    ones = np.ones(total, dtype=np.int32)
    columns = {name: pa.array(np.full(rows, name)) for name in ("sample_id", "group_id", "session_id", "prompt_id",
                                                                 "task")}
    columns |= {
        "prompt_ids": token_lists(pa.array(ones)),
        "response_ids": token_lists(pa.array(ones)),
        "loss_mask": token_lists(pa.array(ones.astype(np.int8))).cast(ROLLOUT_V1.schema.field("loss_mask").type),
        "rollout_logprobs": token_lists(pa.array(-ones.astype(np.float32))).cast(
            ROLLOUT_V1.schema.field("rollout_logprobs").type),
        "weight_versions": pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)),
                                                    pa.array(np.arange(rows, dtype=np.int64))),
        "reward": pa.array(np.zeros(rows)),
        "status": pa.array(np.full(rows, "ok")),
    } | {name: pa.array(np.zeros(rows)) for name in ("t_start", "t_end", "gen_seconds", "env_seconds")}
    # What a training stage adds is left null here.
    columns |= {field.name: pa.nulls(rows, field.type) for field in ROLLOUT_V1.schema if field.name not in columns}
    table = pa.table(columns).cast(ROLLOUT_V1.schema)
    size = -(-rows // chunks)
    return pa.concat_tables([table.slice(start, size) for start in range(0, rows, size)])


def test_row_index_survives_chunking_and_flattening():
    rows, tokens_per_row = 200_000, 16
    table = token_table(rows, tokens_per_row, chunks=7)
    assert table.column("rollout_logprobs").num_chunks == 7
    validate_table(ROLLOUT_V1, table, source="mem")
    bad_row = rows - 5
    logprobs = table.column("rollout_logprobs").combine_chunks()
    values = logprobs.values.to_numpy().copy()
    values[bad_row * tokens_per_row + 3] = np.nan
    broken = pa.ListArray.from_arrays(logprobs.offsets, pa.array(values)).cast(logprobs.type)
    table = table.set_column(table.schema.get_field_index("rollout_logprobs"), "rollout_logprobs",
                             pa.chunked_array([broken.slice(0, 1000), broken.slice(1000)]))
    with pytest.raises(ContractError) as caught:
        validate_table(ROLLOUT_V1, table, source="mem")
    assert (caught.value.column, caught.value.row) == ("rollout_logprobs", bad_row)


def test_null_list_hiding_values_is_neither_checked_nor_miscounted():
    # Arrow lets a null list keep a non-empty slice of child values; those values are not data.
    # Message 0 has null tool_calls hiding invalid arguments; message 1's arguments are invalid too.
    message_type = CHAT_V1.schema.field("messages").type.value_type
    tool_calls_type = message_type.field("tool_calls").type
    calls = pa.StructArray.from_arrays(
        [pa.array(["hidden", "seen"]), pa.array(["not json", "[1]"])], fields=list(tool_calls_type.value_type)
    )
    tool_calls = pa.ListArray.from_arrays(
        pa.array([0, 1, 2], pa.int32()), calls, type=tool_calls_type, mask=pa.array([True, False])
    )
    assert tool_calls.to_pylist()[0] is None and len(tool_calls.values) == 2
    messages = pa.StructArray.from_arrays(
        [pa.array(["assistant", "assistant"]), pa.array(["", ""]), pa.array([None, None], pa.string()), tool_calls,
         pa.array([False, False]), pa.array([None, None], pa.bool_())],
        fields=list(message_type),
    )
    conversations = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), messages)
    table = pa.table({"id": ["a", "b"], "suite": ["s", "s"], "split": ["t", "t"], "thinking_mode": ["turn", "turn"],
                      "tools_json": pa.array([None, None], pa.string()), "messages": conversations})
    with pytest.raises(ContractError) as caught:
        validate_table(CHAT_V1, table, source="mem")
    assert (caught.value.column, caught.value.row) == ("messages.tool_calls.arguments_json", 1)
    assert "'[1]'" in str(caught.value)
