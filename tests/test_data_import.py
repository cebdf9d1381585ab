"""`posttrain data import`: the formats people have round-trip into the contracts, every malformed input is
named (file, line, field) and commits nothing, and --skip-bad-rows commits the rest and keeps the rejects."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from data_contracts import CHAT_V1, PREFERENCE_V1, PROMPT_V1, read_parquet
from data_prep.import_data import ImportFailed, import_dataset
from infra.store import open_store
from posttrain.cli import app

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
NONBLANK = TEXT.filter(str.strip)  # a blank reply is refused as a preference side
ARGUMENTS = st.dictionaries(st.sampled_from(["query", "expression", "k"]), st.one_of(TEXT, st.integers()), max_size=2)


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


@st.composite
def openai_conversations(draw):
    messages = [{"role": "user", "content": draw(TEXT)}]
    for _ in range(draw(st.integers(0, 2))):  # tool rounds: a call, then its result
        call = {"type": "function", "function": {"name": draw(st.sampled_from(["search", "calc"])),
                                                 "arguments": json.dumps(draw(ARGUMENTS))}}
        messages += [{"role": "assistant", "content": "", "reasoning_content": draw(TEXT), "tool_calls": [call]},
                     {"role": "tool", "content": draw(TEXT), "error": draw(st.booleans())}]
    messages.append({"role": "assistant", "content": draw(TEXT), "reasoning_content": draw(st.none() | TEXT),
                     "thinking": draw(st.none() | st.booleans())})
    return {"messages": messages, "tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}]}


def imported_rows(store, artifact, contract) -> list[dict]:
    local = artifact.download(Path(store.root_uri.removeprefix("file://")).parent / "read" / artifact.name)
    return [row for split in ("train", "test") for row in read_parquet(contract, local / f"{split}.parquet").to_pylist()]


@given(st.lists(openai_conversations(), min_size=1, max_size=6))
def test_openai_messages_round_trip(tmp_path_factory, conversations):
    tmp = tmp_path_factory.mktemp("openai")
    store = open_store(str(tmp / "store"))
    imported = import_dataset(store, write_jsonl(tmp / "chats.jsonl", [dict(c, id=i) for i, c in enumerate(conversations)]),
                              "chat", test_fraction=0.5)
    rows = {row["id"]: row for row in imported_rows(store, imported.dataset, CHAT_V1)}
    for i, conversation in enumerate(conversations):
        got = rows[str(i)]["messages"]
        assert [m["role"] for m in got] == [m["role"] for m in conversation["messages"]]
        assert [m["content"] for m in got] == [m["content"] for m in conversation["messages"]]
        assert [m.get("error", False) for m in conversation["messages"]] == [m["error"] for m in got]
        assert [m.get("thinking") for m in conversation["messages"]] == [m["thinking"] for m in got]
        calls = [json.loads(c["arguments_json"]) for m in got for c in (m["tool_calls"] or [])]
        assert calls == [json.loads(c["function"]["arguments"]) for m in conversation["messages"]
                         for c in m.get("tool_calls", [])]
    assert sum(imported.rows.values()) == len(conversations)


@given(st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=5), st.sampled_from(["sharegpt", "completion"]))
def test_sharegpt_and_prompt_completion_round_trip(tmp_path_factory, pairs, style):
    tmp = tmp_path_factory.mktemp(style)
    if style == "sharegpt":
        records = [{"id": i, "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
                   for i, (q, a) in enumerate(pairs)]
    else:
        records = [{"id": i, "prompt": q, "completion": a} for i, (q, a) in enumerate(pairs)]
    store = open_store(str(tmp / "store"))
    imported = import_dataset(store, write_jsonl(tmp / "rows.jsonl", records), "chat")
    rows = {row["id"]: row for row in imported_rows(store, imported.dataset, CHAT_V1)}
    assert {i: [m["content"] for m in rows[str(i)]["messages"]] for i in range(len(pairs))} == {
        i: [q, a] for i, (q, a) in enumerate(pairs)}


@given(st.lists(st.tuples(TEXT, NONBLANK, NONBLANK).filter(lambda t: t[1] != t[2]), min_size=1, max_size=5))
def test_preferences_and_prompts_round_trip(tmp_path_factory, triples):
    tmp = tmp_path_factory.mktemp("pairs")
    store = open_store(str(tmp / "store"))
    pairs = import_dataset(store, write_jsonl(tmp / "pairs.jsonl", [
        {"id": i, "prompt": p, "chosen": c, "rejected": r} for i, (p, c, r) in enumerate(triples)]), "preference")
    got = {row["id"]: (row["prompt"][0]["content"], row["chosen"], row["rejected"])
           for row in imported_rows(store, pairs.dataset, PREFERENCE_V1)}
    assert got == {str(i): t for i, t in enumerate(triples)}
    prompts = import_dataset(store, write_jsonl(tmp / "prompts.jsonl", [
        {"id": i, "prompt": p, "answer": c} for i, (p, c, _) in enumerate(triples)]), "prompt")
    got = {row["id"]: (row["messages"][0]["content"], row["reference_answer"])
           for row in imported_rows(store, prompts.dataset, PROMPT_V1)}
    assert got == {str(i): (p, c) for i, (p, c, _) in enumerate(triples)}


GOOD = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "calc", "arguments": "{}"}}]}
MALFORMED = {
    "unknown role": ("chat", {"messages": [{"role": "robot", "content": "x"}, GOOD["messages"][1]]}, "messages[0].role"),
    "missing role": ("chat", {"messages": [{"content": "x"}, GOOD["messages"][1]]}, "messages[0].role"),
    "tool call with no tool turn after it": ("chat", {"messages": [GOOD["messages"][0], CALL]}, "messages[1].tool_calls"),
    "tool result first": ("chat", {"messages": [{"role": "tool", "content": "1"}, GOOD["messages"][1]]},
                          "messages[0].role"),
    "non-string content": ("chat", {"messages": [{"role": "user", "content": 42}, GOOD["messages"][1]]},
                           "messages[0].content"),
    "empty conversation": ("chat", {"messages": []}, "messages"),
    "messages not a list": ("chat", {"messages": "hello"}, "messages"),
    "no conversation field": ("chat", {"text": "hello"}, "messages"),
    "no assistant turn": ("chat", {"messages": [GOOD["messages"][0]]}, "no assistant turn"),
    "tool calls on a user turn": ("chat", {"messages": [{**CALL, "role": "user"}, GOOD["messages"][1]]},
                                  "messages[0].tool_calls"),
    "tool arguments not JSON": ("chat", {"messages": [GOOD["messages"][0], {**CALL, "tool_calls": [
        {"function": {"name": "calc", "arguments": "{oops"}}]}, {"role": "tool", "content": "1"}, GOOD["messages"][1]]},
        "tool_calls[0].arguments"),
    "tool with no name": ("chat", {"messages": [GOOD["messages"][0], {**CALL, "tool_calls": [{"function": {}}]},
                                                {"role": "tool", "content": "1"}, GOOD["messages"][1]]},
                          "tool_calls[0].name"),
    "thinking not a boolean": ("chat", {"messages": [GOOD["messages"][0], {**GOOD["messages"][1], "thinking": "yes"}]},
                               "messages[1].thinking"),
    "error not a boolean": ("chat", {"messages": [GOOD["messages"][0], {**GOOD["messages"][1], "error": 1}]},
                            "messages[1].error"),
    "unknown thinking mode": ("chat", {**GOOD, "thinking_mode": "always"}, "thinking_mode"),
    "tools not a list": ("chat", {**GOOD, "tools": {"name": "calc"}}, "tools"),
    "a 10 MB message": ("chat", {"messages": [{"role": "user", "content": "x" * 10_000_000}, GOOD["messages"][1]]},
                        "messages[0].content"),
    "ShareGPT unknown speaker": ("chat", {"conversations": [{"from": "bot", "value": "x"}]}, "conversations[0].from"),
    "ShareGPT value not a string": ("chat", {"conversations": [{"from": "human", "value": ["x"]},
                                                               {"from": "gpt", "value": "y"}]},
                                    "conversations[0].content"),
    "a record that is a list": ("chat", [1, 2], "record"),
    "an invalid JSON line": ("chat", "{not json", "is not JSON"),
    "a prompt ending in an assistant turn": ("prompt", GOOD, "messages[1].role"),
    "metadata not an object": ("prompt", {"prompt": "2+2?", "metadata": "easy"}, "metadata"),
    "chosen equal to rejected": ("preference", {"prompt": "hi", "chosen": "hello", "rejected": "hello"}, "rejected"),
    "chosen missing": ("preference", {"prompt": "hi", "rejected": "go away"}, "chosen"),
    "empty rejected": ("preference", {"prompt": "hi", "chosen": "hello", "rejected": "  "}, "rejected"),
    "preference prompt not text": ("preference", {"prompt": 3, "chosen": "a", "rejected": "b"}, "messages"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_row_is_named_and_nothing_is_committed(case, tmp_path):
    kind, bad, named = MALFORMED[case]
    good = GOOD if kind == "chat" else {"prompt": "hi", "chosen": "a", "rejected": "b"} if kind == "preference" \
        else {"prompt": "2+2?"}
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(good, id="first"), bad, dict(good, id="third")])
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(ImportFailed) as refused:
        import_dataset(store, source, kind)
    assert str(refused.value).startswith(f"{source} line 2: ") and named in str(refused.value), str(refused.value)[:300]
    assert store.list_committed() == []


def test_invalid_utf8_is_named_by_line(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"messages": "\xff\xfe"}\n')
    with pytest.raises(ImportFailed, match=rf"^{source} line 2: line: is not UTF-8"):
        import_dataset(open_store(str(tmp_path / "store")), source, "chat")


def test_skip_bad_rows_commits_the_rest_and_writes_the_rejects(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, id=str(i)) for i in range(8)] + ["{oops", {"messages": []}])
    imported = import_dataset(open_store(str(tmp_path / "store")), source, "chat", skip_bad_rows=True)
    assert sum(imported.rows.values()) == 8 and imported.rejected == 2
    rejects = [json.loads(line) for line in imported.rejects_file.read_text().splitlines()]
    assert [r["where"] for r in rejects] == [f"{source} line 9", f"{source} line 10"]
    lineage = imported.dataset.lineage()["config"]
    assert lineage["rejected"] == 2 and len(lineage["source_sha256"]) == 64


def test_the_rejects_file_replaces_a_symlink_planted_at_its_name_instead_of_writing_through_it(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, id=str(i)) for i in range(4)] + ["{oops"])
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "rows.jsonl.rejected.jsonl").symlink_to(victim)
    imported = import_dataset(open_store(str(tmp_path / "store")), source, "chat", skip_bad_rows=True)
    assert victim.read_text() == "keep me"
    assert not imported.rejects_file.is_symlink() and "line 5" in imported.rejects_file.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_parquet_and_a_datasets_folder_are_read_through_datasets(tmp_path):
    records = [dict(GOOD, id=str(i)) for i in range(6)]
    datasets.Dataset.from_list(records).to_parquet(str(tmp_path / "rows.parquet"))
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "saved"))
    store = open_store(str(tmp_path / "store"))
    from_parquet = import_dataset(store, tmp_path / "rows.parquet", "chat", name="mine")
    from_folder = import_dataset(store, tmp_path / "saved", "chat", name="mine")
    assert from_parquet.dataset.uri == from_folder.dataset.uri  # same rows, same splits, same content
    assert pq.read_metadata(Path(from_parquet.dataset.uri.removeprefix("file://")) / "train.parquet").num_rows > 0


def test_splits_are_deterministic_and_the_cli_names_a_bad_row(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, id=str(i)) for i in range(40)])
    first = import_dataset(open_store(str(tmp_path / "a")), source, "chat", test_fraction=0.25)
    again = import_dataset(open_store(str(tmp_path / "b")), source, "chat", test_fraction=0.25)
    assert first.dataset.digest == again.dataset.digest and 0 < first.rows["test"] < 40
    bad = write_jsonl(tmp_path / "bad.jsonl", [GOOD, {"messages": [{"role": "robot", "content": "x"}]}])
    result = CliRunner().invoke(app, ["data", "import", str(bad), "--as", "chat", "--store", str(tmp_path / "c")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2 and f"{bad} line 2: messages[0].role" in result.output
    done = CliRunner().invoke(app, ["data", "import", str(source), "--as", "chat", "--store", str(tmp_path / "c")])
    assert done.exit_code == 0 and "datasets/rows-" in done.output
