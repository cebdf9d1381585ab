"""Bad dataset bytes fail with an error naming the dataset (its URI) and file, column and row where they
apply: a corrupt Parquet page, and text that is not UTF-8, refused when it is written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from data_contracts import CHAT_V1, ContractError, read_parquet, write_parquet
from infra.store import open_store
from stages.common.inputs import load_split


def test_a_corrupt_page_names_the_dataset_uri_and_file(small_store, tmp_path):
    store = open_store(small_store["root"])
    dataset = store.open(next(uri for uri in small_store["datasets"] if "/arith-" in uri))
    local = Path(dataset.download(tmp_path / "dataset-0"))
    data = bytearray((local / "train.parquet").read_bytes())
    data[4:24] = b"\xff" * 20  # the first page's thrift header
    (local / "train.parquet").write_bytes(bytes(data))
    with pytest.raises(ContractError, match=rf"^{dataset.uri}/train\.parquet: not a readable Parquet file"):
        load_split([dataset], "train", tmp_path)


def test_text_that_is_not_utf8_is_refused_at_write_naming_column_and_row(small_store, tmp_path):
    rows = read_parquet(CHAT_V1, Path(open_store(small_store["root"]).open(small_store["datasets"][0])
                                      .download(tmp_path / "d")) / "test.parquet")
    table = rows.slice(0, 3)
    offsets = pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0]))
    ids = pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"ok\xff\xfexy")])
    bad = table.set_column(table.column_names.index("id"), "id", ids)
    target = tmp_path / "bad.parquet"
    with pytest.raises(ContractError, match=r"column 'id', row 1: invalid data .*Invalid UTF8"):
        write_parquet(CHAT_V1, bad, target)
    assert not target.exists()
