"""Commit/open/read/download round-trips, run against file:// and s3:// (moto)."""

from pathlib import Path

import pytest

from infra.store import (
    ArtifactExistsError,
    ArtifactNotCommittedError,
    ArtifactStoreError,
    open_store,
    sha256_file,
)


def _source_tree(root: Path) -> Path:
    (root / "shards").mkdir(parents=True)
    (root / "shards" / "model-00001.safetensors").write_bytes(b"\x00\x01" * 5000)
    (root / "config.json").write_text('{"hidden": 64}')
    return root


def test_round_trip(store_root: str, tmp_path: Path) -> None:
    store = open_store(store_root)
    source = _source_tree(tmp_path / "src")
    writer = store.begin("checkpoints/sft/run-1")
    writer.put_dir(source, prefix="model")
    writer.put_file("tokenizer.json", source / "config.json")
    writer.put_bytes("notes/readme.txt", b"hello")
    committed = writer.commit({"parent": "sha256:abc", "step": 100})

    assert committed.uri == f"{store.root_uri}/checkpoints/sft/run-1"
    assert sorted(committed.manifest.files) == [
        "model/config.json", "model/shards/model-00001.safetensors", "notes/readme.txt", "tokenizer.json",
    ]

    for reference in ("checkpoints/sft/run-1", committed.uri):
        opened = store.open(reference)
        assert opened.digest == committed.digest
    assert opened.lineage() == {"parent": "sha256:abc", "step": 100}
    assert opened.read_bytes("notes/readme.txt") == b"hello"
    assert opened.manifest.files["tokenizer.json"].sha256 == sha256_file(source / "config.json")

    out = opened.download(tmp_path / "out")
    assert (out / "model/shards/model-00001.safetensors").read_bytes() == b"\x00\x01" * 5000
    assert not list(out.rglob("*.partial"))
    assert opened.verify() == []

    assert store.is_committed("checkpoints/sft/run-1")
    assert store.list_committed("checkpoints/") == ["checkpoints/sft/run-1"]
    assert store.list_committed("checkpoints/rl") == []


def test_recommit_is_idempotent_and_immutable(store_root: str) -> None:
    store = open_store(store_root)
    first = store.begin("data/mix")
    first.put_bytes("part-0.parquet", b"rows")
    committed = first.commit(b'{"source": "a"}')

    again = store.begin("data/mix")
    again.put_bytes("part-0.parquet", b"rows")
    same = again.commit({"source": "retry"})
    assert same.digest == committed.digest
    assert same.lineage() == {"source": "a"}  # the first commit's lineage stands

    different = store.begin("data/mix")
    different.put_bytes("part-0.parquet", b"other rows")
    with pytest.raises(ArtifactExistsError, match="immutable"):
        different.commit({"source": "b"})
    assert store.open("data/mix").read_bytes("part-0.parquet") == b"rows"


def test_reader_refuses_uncommitted(store_root: str) -> None:
    store = open_store(store_root)
    writer = store.begin("evals/half")
    writer.put_bytes("scores.json", b"{}")
    writer.claim()
    writer.upload_files()
    writer.write_manifest()
    writer.write_lineage({})

    with pytest.raises(ArtifactNotCommittedError, match=f"{store.root_uri}/evals/half"):
        store.open("evals/half")
    with pytest.raises(ArtifactNotCommittedError):
        store.open("evals/never-written")
    assert not store.is_committed("evals/half")
    assert store.list_committed() == []

    writer.mark_success()
    assert store.list_committed() == ["evals/half"]


def test_artifacts_do_not_nest(store_root: str) -> None:
    store = open_store(store_root)
    outer = store.begin("runs/r1")
    outer.put_bytes("a", b"a")
    outer.commit({})
    inner = store.begin("runs/r1/step-1")
    inner.put_bytes("b", b"b")
    with pytest.raises(ArtifactStoreError, match="nest inside committed artifact runs/r1"):
        inner.commit({})
    # The other direction matters more: clearing leftovers under "runs" must not
    # delete the committed runs/r1 inside it.
    enclosing = store.begin("runs")
    enclosing.put_bytes("index.json", b"{}")
    with pytest.raises(ArtifactStoreError, match="enclose committed artifact runs/r1"):
        enclosing.commit({})
    assert store.open("runs/r1").verify() == []


@pytest.mark.parametrize("name", ["datasets/.hidden", ".x/y", "datasets/.x.0123abcd.tmp"])
def test_a_name_segment_starting_with_a_dot_is_refused(tmp_path: Path, name: str) -> None:
    # hidden from a listing of the folder, and the shape of the file backend's temporary files
    with pytest.raises(ValueError, match="starts with '.'"):
        open_store(str(tmp_path)).begin(name)
