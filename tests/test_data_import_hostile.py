"""`posttrain data import` given hostile inputs: a device or a FIFO for a file, JSON nested without end, NaN
literals, ids of megabytes, names that are paths or look-alikes. Each is refused naming the file, the line or row
and what is wrong, at once and in one line, and nothing is committed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from data_contracts import PROMPT_V1
from data_prep.import_data import ImportFailed, import_dataset
from infra.store import open_store
from posttrain.cli import app
from tests.test_data_import import GOOD, imported_rows, write_jsonl


def refused(tmp_path: Path, source: Path, kind: str = "chat", **options) -> str:
    """The import's one-line refusal, having checked that nothing was committed."""
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(ImportFailed) as refusal:
        import_dataset(store, source, kind, **options)
    assert store.list_committed() == []
    return str(refusal.value)


def cli(tmp_path: Path, *args: str):
    return CliRunner().invoke(app, ["data", "import", *args], env={"POSTTRAIN_STORE": str(tmp_path / "store"),
                                                                   "COLUMNS": "400"})


@pytest.mark.timeout(60)  # today's failure is a hang, not a wrong answer
@pytest.mark.parametrize("kind_of_file", ["/dev/zero", "fifo.jsonl", "fifo.parquet"])
def test_a_device_or_a_fifo_is_refused_at_once_naming_it(tmp_path, kind_of_file):
    source = Path(kind_of_file) if kind_of_file.startswith("/") else tmp_path / kind_of_file
    if source.parent == tmp_path:
        os.mkfifo(source)
    result = cli(tmp_path, str(source), "--as", "chat")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output[-500:]
    assert result.output.startswith(f"error: {source}: not a regular file")
    assert not (tmp_path / "store" / "datasets").exists()


def test_json_nested_deeper_than_the_limit_is_named_by_line_and_field(tmp_path):
    chat = write_jsonl(tmp_path / "deep.jsonl", [GOOD, "[" * 200_000 + "]" * 200_000])
    assert refused(tmp_path, chat).startswith(f"{chat} line 2: line: nested deeper than 64 levels")
    # Deep enough to break nothing today, but past what any record needs: refused as well.
    prompts = write_jsonl(tmp_path / "metadata.jsonl", [{"prompt": "2+2?", "metadata": json.loads("[" * 64 + "]" * 64)}])
    assert refused(tmp_path, prompts, "prompt").startswith(f"{prompts} line 1: line: nested deeper than 64 levels")
    arguments = {"function": {"name": "calc", "arguments": "[" * 200_000 + "]" * 200_000}}
    calls = write_jsonl(tmp_path / "calls.jsonl", [{"messages": [
        GOOD["messages"][0], {"role": "assistant", "content": "", "tool_calls": [arguments]},
        {"role": "tool", "content": "4"}, GOOD["messages"][1]]}])
    assert refused(tmp_path, calls).startswith(f"{calls} line 1: messages[1].tool_calls[0].arguments: nested deeper")


def test_a_deep_line_is_one_bad_row_that_skip_bad_rows_skips(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, id=str(i)) for i in range(3)] + ["[" * 200_000])
    imported = import_dataset(open_store(str(tmp_path / "store")), source, "chat", skip_bad_rows=True)
    assert sum(imported.rows.values()) == 3 and imported.problems == [
        f"{source} line 4: line: nested deeper than 64 levels of objects and arrays"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_named_as_what_they_are(tmp_path, constant):
    prompt = write_jsonl(tmp_path / "prompt.jsonl", [f'{{"prompt": {constant}}}'])
    assert refused(tmp_path, prompt, "prompt") == f"{prompt} line 1: line: {constant} is not valid JSON (a number must be finite)"
    metadata = write_jsonl(tmp_path / "metadata.jsonl", [f'{{"prompt": "2+2?", "metadata": {{"x": [1, {constant}]}}}}'])
    assert f"line 1: line: {constant} is not valid JSON" in refused(tmp_path, metadata, "prompt")


def test_a_parquet_float_that_json_cannot_write_is_named_and_a_null_domain_is_none(tmp_path):
    source = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"prompt": ["2+2?", "3+3?"], "metadata": [{"x": 1.0}, {"x": float("nan")}]}), source)
    assert refused(tmp_path, source, "prompt").startswith(f"{source} row 1: metadata: cannot be written as JSON")
    ids = tmp_path / "ids.parquet"  # an integer id column with a missing value, as pandas writes it: floats
    pq.write_table(pa.table({"prompt": ["2+2?", "3+3?"], "id": [1.0, float("nan")]}), ids)
    assert refused(tmp_path, ids, "prompt").startswith(f"{ids} row 0: id: must be a string or an integer, got float")
    domains = tmp_path / "domains.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "prompt": ["2+2?", "3+3?"], "domain": ["math", None]}), domains)
    store = open_store(str(tmp_path / "store"))
    imported = import_dataset(store, domains, "prompt", name="domains")
    assert {row["id"]: row["domain"] for row in imported_rows(store, imported.dataset, PROMPT_V1)} == {
        "a": "math", "b": "domains"}


@pytest.mark.parametrize(("row_id", "named"), [
    ("x" * 5_000_000, "id: 5,000,000 characters; at most 256"),
    ("a\x1b[2Jb", r"id: holds the control or invisible character '\x1b'"),
    ("admin\u202etxt.exe", r"id: holds the control or invisible character '\u202e'"),
    (True, "id: must be a string or an integer, got bool"),
])
def test_a_row_id_is_bounded_and_printable(tmp_path, row_id, named):
    source = write_jsonl(tmp_path / "rows.jsonl", [dict(GOOD, id="first"), dict(GOOD, id=row_id)])
    assert refused(tmp_path, source).startswith(f"{source} line 2: {named}")


@pytest.mark.parametrize(("line", "named"), [
    ('{"id": ' + "9" * 5000 + ', "prompt": "a", "completion": "b"}', "line: holds a number too long to read"),
    (json.dumps({"messages": "\ud800"}), r"line: holds a lone surrogate '\ud800', which is not text"),
])
def test_json_python_reads_but_no_row_can_hold_is_named_by_line(tmp_path, line, named):
    source = write_jsonl(tmp_path / "rows.jsonl", [GOOD, line])
    assert refused(tmp_path, source).startswith(f"{source} line 2: {named}")


def test_a_line_past_the_record_limit_stops_the_read_naming_the_line(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [GOOD])
    with source.open("ab") as handle:
        handle.truncate(64 * 2**20)  # 64 MiB of zeros and no newline, sparse on disk
    problem = refused(tmp_path, source, skip_bad_rows=True)
    assert problem == f"{source} line 2: longer than 16,000,000 bytes, the most one record takes; is this a JSONL file?"


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    source = tmp_path / "rows.parquet"
    source.write_text(json.dumps(GOOD) + "\n")
    assert refused(tmp_path, source).startswith(f"{source}: not a Parquet file this can read (")


@pytest.mark.parametrize("name", ["../../../tmp/x", "%2e%2e/x", "d\u0430ta", "\u30c7\u30fc\u30bf", ".hidden", "",
                                  "a" * 101, "my data", "-flag", "x\n"])
def test_a_given_name_that_is_no_dataset_name_is_refused_not_rewritten(tmp_path, name):
    source = write_jsonl(tmp_path / "rows.jsonl", [GOOD])
    problem = refused(tmp_path, source, name=name)
    assert problem.startswith("dataset name ") and problem.endswith(
        "not allowed; a name is ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, "
        "at most 100 characters") and ascii(name[:100]) in problem


def test_the_cli_refuses_a_path_as_a_name_in_one_line(tmp_path):
    source = write_jsonl(tmp_path / "rows.jsonl", [GOOD])
    result = cli(tmp_path, str(source), "--as", "chat", "--name", "../../../tmp/x")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith("error: dataset name '../../../tmp/x': not allowed")
    assert not (tmp_path / "store" / "datasets").exists()


@pytest.mark.parametrize(("file_name", "label"), [("My Data.jsonl", "My-Data"), (".hidden.jsonl", "hidden"),
                                                  ("2024 chats (v2).jsonl", "2024-chats-v2")])
def test_a_name_made_from_the_file_name_is_a_dataset_name_never_hidden(tmp_path, file_name, label):
    source = write_jsonl(tmp_path / file_name, [GOOD])
    imported = import_dataset(open_store(str(tmp_path / "store")), source, "chat")
    assert imported.dataset.name.removeprefix("datasets/").rsplit("-", 1)[0] == label


def test_a_file_name_with_no_ascii_letter_asks_for_a_name(tmp_path):
    source = write_jsonl(tmp_path / "\u30c7\u30fc\u30bf.jsonl", [GOOD])
    assert refused(tmp_path, source) == (r"'\u30c7\u30fc\u30bf' has no ASCII letter or digit to make a dataset name "
                                         "of; name the dataset (--name)")
