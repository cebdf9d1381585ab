"""Downloads are complete or absent, engines fetch no optimizer state, and no download outlives its use."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from data_contracts.lineage import Lineage
from infra.publish import publish_directory
from infra.store import open_store
from infra.store.errors import IntegrityError
from rollout.process import EngineProcess
from stages.common.inputs import download_once


@pytest.fixture(scope="module")
def with_resume_state(small_store, tmp_path_factory) -> str:
    """The initial checkpoint plus a `deepspeed/` folder, as every committed training step has."""
    store = open_store(small_store["root"])
    init = store.open(small_store["init"])
    local = Path(init.download(tmp_path_factory.mktemp("resume") / "checkpoint"))
    (local / "deepspeed").mkdir()
    (local / "deepspeed" / "optimizer_states.pt").write_bytes(b"\0" * 4096)
    lineage = Lineage.model_validate(init.lineage()).model_copy(update={"name": "with resume state"})
    return publish_directory(store, "checkpoints/tests/with-resume-state", local, lineage).uri


def test_a_failed_download_leaves_nothing_to_trust_and_the_next_one_completes(small_store, tmp_path):
    store = open_store(small_store["root"])
    dataset = store.open(small_store["datasets"][0])
    stored = Path(dataset.uri.removeprefix("file://")) / "train.parquet"
    original = stored.read_bytes()
    stored.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # the blob changed under the download
    try:
        with pytest.raises(IntegrityError):
            download_once(dataset, tmp_path / "dataset-0")
    finally:
        stored.write_bytes(original)
    assert not (tmp_path / "dataset-0").exists()  # a rerun does not take the half for the whole
    local = download_once(dataset, tmp_path / "dataset-0")
    assert {p.name for p in local.iterdir()} >= {"train.parquet", "test.parquet"}
    assert not list(tmp_path.glob(".dataset-0.partial*"))


def test_an_engine_fetches_no_resume_state_and_removes_its_downloads(small_store, with_resume_state, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # this process chose it before
    (tmp_path / "tmp").mkdir()
    engine = EngineProcess(with_resume_state, tmp_path / "engine.log")
    client = engine.start()
    try:
        [workdir] = list((tmp_path / "tmp").glob("posttrain-engine-*"))
        served = [p for p in workdir.rglob("*") if p.is_file()]
        assert any(p.name == "model.safetensors" for p in served)
        assert not any("deepspeed" in p.parts for p in served)
        client.update_weights(with_resume_state, weight_version="1")
        client.update_weights(small_store["init"], weight_version="2")
        # The first update's download went when the second replaced it: one serving copy at a time.
        assert len([d for d in workdir.iterdir() if d.is_dir()]) == 2  # the start-up copy and the one served now
    finally:
        engine.stop()
    assert list((tmp_path / "tmp").iterdir()) == []
