"""What a stage trains from (`StageInputs`: its process group, event stream, store, scratch folder, init
checkpoint and datasets; fetched by stages/common/stage_main.py), and reading its datasets' rows
(`load_split`, checked against their exact Arrow schema)."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from data_contracts import CHAT_V1, read_parquet
from data_contracts.contract import Contract
from infra.store import ArtifactStore, CommittedArtifact
from model.tokenizer import load_tokenizer
from stages.common.distributed import Dist
from stages.common.events import EventLog


@dataclass(frozen=True)
class StageInputs:
    dist: Dist
    events: EventLog
    store: ArtifactStore
    workdir: Path  # this rank's scratch directory for the run
    init: CommittedArtifact
    init_dir: Path  # the init checkpoint, downloaded (digests checked)
    datasets: list[CommittedArtifact]

    def tokenizer(self):
        return load_tokenizer(self.init_dir)


def load_split(datasets: list[CommittedArtifact], split: str, workdir: Path, contract: Contract = CHAT_V1) -> list[dict]:
    """All rows of `split` across the datasets, in dataset order (deterministic), checked against `contract`."""
    rows: list[dict] = []
    for index, dataset in enumerate(datasets):
        local = download_once(dataset, workdir / f"dataset-{index}")
        rows += read_parquet(contract, local / f"{split}.parquet", source=f"{dataset.uri}/{split}.parquet").to_pylist()
    return rows


def download_once(artifact: CommittedArtifact, local_dir: Path) -> Path:
    """`local_dir` holding the whole artifact: downloaded beside it and renamed into place when complete,
    so a download killed half-way is started again, never trusted (a rerun found `init/config.json`
    without the tokenizer and failed every time)."""
    if local_dir.exists():
        return local_dir
    partial = local_dir.with_name(f".{local_dir.name}.partial-{uuid.uuid4().hex}")
    try:
        artifact.download(partial)
        os.rename(partial, local_dir)
    except OSError:
        if not local_dir.is_dir():  # not a twin download that finished first
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return local_dir

