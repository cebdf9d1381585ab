"""Data import: `posttrain data import FILE`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from bench.hostile.cases import Case


def data_import_cases(scratch: Path) -> list[Case]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from posttrain.cli import app

    folder = scratch / "imports"
    folder.mkdir()
    env = {"POSTTRAIN_STORE": str(scratch / "import-store"), "COLUMNS": "200"}
    chat = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}

    def jsonl(name: str, *lines: str) -> Path:
        path = folder / name
        path.write_text("".join(line + "\n" for line in lines))
        return path

    def parquet(name: str, columns: dict) -> Path:
        path = folder / name
        pq.write_table(pa.table(columns), path)
        return path

    def imported(path: Path | str, kind: str = "chat", *options: str):
        return lambda: CliRunner().invoke(app, ["data", "import", str(path), "--as", kind, *options], env=env)

    good = jsonl("good.jsonl", json.dumps(chat))
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    sparse = jsonl("sparse.jsonl", json.dumps(chat))
    os.truncate(sparse, 64 << 20)  # 64 MiB of zeros after the first line, no newline, sparse on disk
    tool_call = {"role": "assistant", "content": "", "tool_calls": [{"function": {
        "name": "calc", "arguments": "[" * 200_000 + "]" * 200_000}}]}
    cases = [
        ("/dev/zero as the data file", imported("/dev/zero"), "character device"),
        ("a FIFO as the data file", imported(fifo), "FIFO"),
        ("a 64 MiB line of zeros", imported(sparse), "16,000,000 bytes"),
        ("200,000 nested arrays", imported(jsonl("deep.jsonl", "[" * 200_000 + "]" * 200_000)), "nested deeper"),
        ("200,000 nested arrays in tool arguments", imported(jsonl("deep-args.jsonl", json.dumps({"messages": [
            chat["messages"][0], tool_call, {"role": "tool", "content": "4"}, chat["messages"][1]]}))),
         "tool_calls[0].arguments"),
        ("--name ../../../tmp/x", imported(good, "chat", "--name", "../../../tmp/x"), "dataset name"),
        ("--name %2e%2e/x", imported(good, "chat", "--name", "%2e%2e/x"), "dataset name"),
        ("--name with a Cyrillic a", imported(good, "chat", "--name", "d\u0430ta"), r"\u0430"),
        ("--name .hidden", imported(good, "chat", "--name", ".hidden"), "starting with a letter or digit"),
        ("a file named in katakana, no --name", imported(jsonl("\u30c7\u30fc\u30bf.jsonl", json.dumps(chat))), "--name"),
        ("a 5 MB id", imported(jsonl("big-id.jsonl", json.dumps({**chat, "id": "x" * 5_000_000}))), "at most 256"),
        ("an id with a terminal escape", imported(jsonl("escape-id.jsonl", json.dumps({**chat, "id": "a\x1b[2Jb"}))),
         "control or invisible character"),
        ("a NaN prompt", imported(jsonl("nan.jsonl", '{"prompt": NaN}'), "prompt"), "NaN is not valid JSON"),
        ("-Infinity in metadata", imported(jsonl("inf.jsonl", '{"prompt": "2+2?", "metadata": {"x": -Infinity}}'),
                                           "prompt"), "-Infinity is not valid JSON"),
        ("an integer of 5,000 digits", imported(jsonl("digits.jsonl", '{"id": ' + "9" * 5000 + "}")),
         "number too long"),
        ("a lone surrogate escape", imported(jsonl("surrogate.jsonl", '{"prompt": "\\ud800", "completion": "4"}')),
         "lone surrogate"),
        ("a Parquet float id column with NaN", imported(parquet("nan-id.parquet", {
            "prompt": ["2+2?", "3+3?"], "id": [1.0, float("nan")]}), "prompt"), "id: must be a string or an integer"),
        ("NaN in a Parquet metadata struct", imported(parquet("nan-meta.parquet", {
            "prompt": ["2+2?"], "metadata": [{"x": float("nan")}]}), "prompt"), "metadata: cannot be written as JSON"),
        ("a .parquet file that is JSONL", imported(jsonl("fake.parquet", json.dumps(chat))), "not a Parquet file"),
    ]
    return [Case("data import", what, attempt, names) for what, attempt, names in cases]
