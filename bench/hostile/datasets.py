"""Datasets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bench.hostile.cases import Case


def dataset_cases(store: dict, scratch: Path) -> list[Case]:
    from data_contracts import CHAT_V1, PROMPT_V1, read_parquet, write_parquet
    from infra.store import open_store
    from stages.common.inputs import load_split

    artifact = open_store(store["root"]).open(store["datasets"][0])
    good = read_parquet(CHAT_V1, artifact.download(scratch / "good") / "test.parquet")
    rows = good.slice(0, 3).to_pylist()

    def written(name: str, data: bytes) -> Path:
        path = scratch / name
        path.write_bytes(data)
        return path

    original = (scratch / "good" / "test.parquet").read_bytes()
    flipped = bytearray(original)
    flipped[4:24] = b"\xff" * 20

    def changed(**fields):
        return [{**rows[0], **fields}, *rows[1:]]

    def message_changed(**fields):
        first = dict(rows[1])
        first["messages"] = [{**first["messages"][0], **fields}, *first["messages"][1:]]
        return [rows[0], first, rows[2]]

    ids = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0])),
                                                 pa.py_buffer(b"ok\xff\xfexy")])
    table = good.slice(0, 3)
    bad_utf8 = table.set_column(table.column_names.index("id"), "id", ids)

    def write(rows_or_table, name="out.parquet"):
        return lambda: write_parquet(CHAT_V1, rows_or_table, scratch / name)

    def read(path, contract=CHAT_V1):
        return lambda: read_parquet(contract, path)

    corrupt_store = open_store(str(scratch / "corrupt-store"))
    writer = corrupt_store.begin("datasets/corrupt")
    writer.put_bytes("train.parquet", bytes(flipped))
    corrupt = writer.commit({})

    cases = [
        ("flipped bytes in a page", read(written("flipped.parquet", bytes(flipped))), "flipped.parquet"),
        ("corrupt file in a committed dataset", lambda: load_split([corrupt], "train", scratch / "load"),
         corrupt.uri),
        ("truncated file", read(written("truncated.parquet", original[: len(original) // 2])), "truncated.parquet"),
        ("empty file", read(written("empty.parquet", b"")), "empty.parquet"),
        ("a CSV named .parquet", read(written("table.parquet", b"id,messages\n1,hi\n")), "table.parquet"),
        ("chat rows read as prompts", read(scratch / "good" / "test.parquet", PROMPT_V1), "chat@1"),
        ("invalid UTF-8 in a column", write(bad_utf8, "utf8.parquet"), "column 'id', row 1"),
        ("unknown thinking_mode", write(changed(thinking_mode="always")), "thinking_mode"),
        ("no messages", write(changed(messages=[])), "messages"),
        ("unknown role", write(message_changed(role="developer")), "role"),
        ("null content", write(message_changed(content=None)), "content"),
        ("tools_json not JSON", write(changed(tools_json="{oops")), "tools_json"),
        ("missing column", write([{k: v for k, v in row.items() if k != "suite"} for row in rows]), "suite"),
        ("extra column", write([{**row, "sutie": "x"} for row in rows]), "sutie"),
        ("a row that is a string", write(["not a row"]), "row 0"),
        ("messages as a string", write(changed(messages="hello")), "messages"),
    ]
    return [Case("datasets", what, attempt, names) for what, attempt, names in cases]
