"""How every stage job starts and ends: `python -m <entry module> --config run.json` joins the process group,
seeds, skips a stage whose output is already committed, otherwise fetches its inputs and trains, then ends
the process."""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from infra.launch import JOB_DIR_ENV
from infra.lifetime import end_process, exit_with_owner
from infra.store import open_store
from stages.common.config import StageIO
from stages.common.distributed import init_distributed
from stages.common.events import EventLog
from stages.common.inputs import StageInputs, download_once


def stage_main(config_type: type[StageIO], train: Callable[[StageIO, StageInputs], str], description: str,
               argv: list[str] | None = None) -> None:
    """`python -m <entry module> --config run.json`: run the stage on a serialized config, then end the
    process (its output is committed, its engines and services stopped: nothing is left to tear down); a stage
    that raised ends with exit code 1, its error printed as an uncaught one would be."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, type=Path, help=f"run.json: a serialized {config_type.__name__}")
    args, _ = parser.parse_known_args(argv)  # launchers append their own flags (e.g. --local_rank)
    exit_with_owner()
    try:
        run_stage(config_type.model_validate_json(args.config.read_text()), train)
    except Exception as error:
        # One line a flow can quote: a multi-node job's last lines are its launchers' reports, not this.
        EventLog(True).emit("error", rank=int(os.environ.get("RANK", "0")), error=f"{type(error).__name__}: {error}")
        sys.excepthook(*sys.exc_info())  # as an uncaught error prints (torch's hook labels it with the rank)
        # Exit as a finished job does, without the interpreter's teardown: the stage's with-blocks have already
        # stopped its engines and services on the way here, and a teardown waiting on a collective or a thread
        # that a failed rank left behind would keep the job (and the flow waiting on it) alive forever.
        end_process(1)
    end_process(0)


def run_stage(config: StageIO, train: Callable[[StageIO, StageInputs], str]) -> str:
    """`train(config, inputs)`, or the committed output's URI when a previous run finished this config."""
    stage = start_stage(config)
    return stage if isinstance(stage, str) else train(config, stage)


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
