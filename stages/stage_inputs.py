"""What every training stage does before it trains: skip if done, else fetch its init checkpoint and data."""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from data_contracts import CHAT_V1
from data_contracts.contract import Contract
from infra.store import ArtifactStore, CommittedArtifact, open_store
from model.tokenizer import load_tokenizer
from stages.distributed import Dist, init_distributed
from stages.events import EventLog


class Provenance(BaseModel):
    """Who and what launched the job; goes into lineage verbatim."""

    model_config = ConfigDict(extra="forbid")
    flow_run_id: str | None = None
    deployment_id: str | None = None
    flow_name: str | None = None
    triggered_by: str | None = None
    wandb_run: str | None = None


class StageIO(BaseModel):
    """The fields every training stage's config has: where it reads, where it writes, how it is seeded."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(..., pattern=r"^[A-Za-z0-9._=+@-]+$", description="Names the run's artifacts.")
    store: str | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    init_checkpoint: str = Field(..., description="URI of the committed checkpoint to start from.")
    datasets: list[str] = Field(..., min_length=1, description="URIs of committed datasets (train/test splits).")
    output_name: str = Field("", description="Artifact name of the final checkpoint; default checkpoints/<stage>/<run_id>.")
    seed: int = 0
    provenance: Provenance = Field(default_factory=Provenance)

    # The folder under checkpoints/ a stage's outputs go to by default.
    stage_name: ClassVar[str] = "stage"
    # What every dataset in `datasets` must be: conversations (chat@1), or RL prompts (prompt@1).
    dataset_contract: ClassVar[Contract] = CHAT_V1

    @model_validator(mode="after")
    def _default_output(self):
        if not self.output_name:
            self.output_name = f"checkpoints/{self.stage_name}/{self.run_id}"
        return self

    @classmethod
    def accepts_contract(cls, contract_id: str | None) -> bool:
        """Whether a dataset published under `contract_id` is one this stage reads."""
        return contract_id == cls.dataset_contract.id

    @property
    def resume_prefix(self) -> str:
        return f"{self.output_name}-steps/"


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start_stage(config: StageIO) -> StageInputs | str:
    """Join the process group, seed, and fetch the stage's inputs; or, when a previous run committed
    the stage's output, return that output's URI (announced as done: re-running is a no-op)."""
    dist = init_distributed()
    seed_everything(config.seed)
    events = EventLog(dist.is_main)
    store = open_store(config.store)
    if store.is_committed(config.output_name):
        uri = store.open(config.output_name).uri
        events.emit("done", checkpoint=uri, resumed_from=None, already_committed=True)
        return uri
    workdir = Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / config.run_id / f"rank-{dist.rank}"
    init = store.open(config.init_checkpoint)
    init_dir = workdir / "init"
    if not (init_dir / "config.json").exists():
        init.download(init_dir)
    return StageInputs(dist, events, store, workdir, init, init_dir, [store.open(uri) for uri in config.datasets])


def stage_main(config_type: type[StageIO], run, description: str, argv: list[str] | None = None) -> None:
    """`python -m stages.<stage> --config run.json`: run the stage on a serialized config."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True, type=Path, help=f"run.json: a serialized {config_type.__name__}")
    args, _ = parser.parse_known_args(argv)  # launchers append their own flags (e.g. --local_rank)
    run(config_type.model_validate_json(args.config.read_text()))
