"""verify() names every file whose stored bytes no longer match the commit."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from infra.store import IntegrityError, open_store
from tests.s3_server import raw_s3_client


def _overwrite(store_root: str, key: str, data: bytes) -> None:
    """Change stored bytes behind the store's back, as bit rot or a stray writer would."""
    root = urlsplit(store_root)
    if root.scheme == "file":
        Path(unquote(root.path), key).write_bytes(data)
    else:
        raw_s3_client(os.environ["POSTTRAIN_S3_ENDPOINT_URL"]).put_object(
            Bucket=root.netloc, Key=f"{root.path.strip('/')}/{key}", Body=data
        )


def test_verify_names_corrupted_file(store_root: str) -> None:
    store = open_store(store_root)
    writer = store.begin("checkpoints/rl/run-7")
    writer.put_bytes("model/a.bin", b"a" * 1000)
    writer.put_bytes("model/b.bin", b"b" * 1000)
    committed = writer.commit({"stage": "rl"})
    assert committed.verify() == []

    flipped = bytearray(b"a" * 1000)
    flipped[500] ^= 0x01
    _overwrite(store_root, "checkpoints/rl/run-7/model/a.bin", bytes(flipped))

    problems = store.open("checkpoints/rl/run-7").verify()
    assert len(problems) == 1 and problems[0].startswith("model/a.bin:")
    with pytest.raises(IntegrityError, match="model/a.bin"):
        committed.read_bytes("model/a.bin")


def test_verify_reports_missing_unexpected_and_lineage(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    writer = store.begin("sets/s1")
    writer.put_bytes("keep.txt", b"k")
    writer.put_bytes("gone.txt", b"g")
    committed = writer.commit({})

    (tmp_path / "sets/s1/gone.txt").unlink()
    (tmp_path / "sets/s1/extra.txt").write_bytes(b"x")
    (tmp_path / "sets/s1/lineage.json").write_bytes(b'{"forged": true}')

    problems = committed.verify()
    assert [p.split(":")[0] for p in problems] == ["lineage.json", "gone.txt", "extra.txt"]
