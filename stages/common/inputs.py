"""What every training stage does before it trains: skip if done, else fetch its init checkpoint and data
(`load_split` reads the datasets' rows, checked against their exact Arrow schema)."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from data_contracts import CHAT_V1, read_parquet
from data_contracts.contract import Contract
from infra.launch import JOB_DIR_ENV
from infra.lifetime import end_process, exit_with_owner
from infra.store import ArtifactStore, CommittedArtifact, open_store
from model.tokenizer import load_tokenizer
from stages.common.config import StageIO
from stages.common.distributed import Dist, init_distributed
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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start_stage(config: StageIO) -> StageInputs | str:
    """Join the process group, seed, and fetch the stage's inputs; or, when a previous run committed
    the stage's output, return that output's URI (announced as done: re-running is a no-op)."""
    dist = init_distributed()
    seed_everything(config.seed)
    # Every rank says where it runs once (the run log shows a multi-node job's ranks on their nodes);
    # after that only rank 0 speaks.
    EventLog(True).emit("rank", rank=dist.rank, world_size=dist.world_size,
                        host=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    events = EventLog(dist.is_main)
    store = open_store(config.store)
    if store.is_committed(config.output_name):
        uri = store.open(config.output_name).uri
        events.emit("done", checkpoint=uri, resumed_from=None, already_committed=True)
        return uri
    # A launcher gives the job a scratch folder of its own (removed when the job ends); started by hand,
    # it is the run's folder under POSTTRAIN_WORKDIR.
    scratch = os.environ.get(JOB_DIR_ENV) or Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / config.run_id
    workdir = Path(scratch) / f"rank-{dist.rank}"
    init = store.open(config.init_checkpoint)
    init_dir = download_once(init, workdir / "init")
    return StageInputs(dist, events, store, workdir, init, init_dir, [store.open(uri) for uri in config.datasets])


def run_stage(config: StageIO, train: Callable[[StageIO, StageInputs], str]) -> str:
    """`train(config, inputs)`, or the committed output's URI when a previous run finished this config."""
    stage = start_stage(config)
    return stage if isinstance(stage, str) else train(config, stage)


def stage_main(config_type: type[StageIO], train: Callable[[StageIO, StageInputs], str], description: str,
               argv: list[str] | None = None) -> None:
    """`python -m <entry module> --config run.json`: run the stage on a serialized config, then end the
    process (its output is committed, its engines and services stopped: nothing is left to tear down)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, type=Path, help=f"run.json: a serialized {config_type.__name__}")
    args, _ = parser.parse_known_args(argv)  # launchers append their own flags (e.g. --local_rank)
    exit_with_owner()
    try:
        run_stage(config_type.model_validate_json(args.config.read_text()), train)
    except Exception as error:
        # One line a flow can quote: a multi-node job's last lines are its launchers' reports, not this.
        EventLog(True).emit("error", rank=int(os.environ.get("RANK", "0")), error=f"{type(error).__name__}: {error}")
        raise
    end_process(0)
