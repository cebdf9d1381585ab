"""A small prepared store and helpers to run the SFT job as a real subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from data_contracts.lineage import Lineage, config_digest
from data_prep.prepare import prepare
from infra.launch import run_stage_job
from infra.launchers.local import LocalLaunch
from infra.publish import publish_directory
from infra.store import open_store
from model.moe_balance import routers
from stages.common.events import parse_event
from stages.sft.config import SftConfig
from suites.prepare import SuiteSizes


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-store")
    prepared = prepare(open_store(str(root / "store")), suites=["arith", "search", "calc"], sizes=SuiteSizes(96, 16),
                       preset="glm5-tiny", seed=0, triggered_by="tests")
    return {"root": str(root / "store"), "init": prepared.init_checkpoint.uri,
            "datasets": sorted(d.uri for d in prepared.datasets.values())}


@pytest.fixture(scope="session")
def nan_init(small_store, tmp_path_factory) -> str:
    """The store's initial checkpoint with its final norm's weights NaN: every logit, every loss NaN."""
    store = open_store(small_store["root"])
    init = store.open(small_store["init"])
    local = Path(init.download(tmp_path_factory.mktemp("nan-init") / "checkpoint"))
    weights = load_file(local / "model.safetensors")
    weights["model.norm.weight"].fill_(float("nan"))
    save_file(weights, local / "model.safetensors", metadata={"format": "pt"})
    lineage = Lineage.model_validate(init.lineage()).model_copy(update={"name": "nan init"})
    return publish_directory(store, "checkpoints/init/nan-init", local, lineage).uri


@pytest.fixture(scope="session")
def two_local_ranks_losses(small_store, tmp_path_factory) -> list[float]:
    """The losses of `small_config` trained by two ranks on this machine: what a multi-node run must match.

    Trained once per test run: under xdist the first worker to ask leaves them in the run's temporary folder,
    keyed by the store's content-addressed init and datasets (each worker prepares its own store, the same
    one), and the others read them."""
    def train() -> list[float]:
        return losses(run_sft(small_config(small_store, "two-local-ranks"), tmp_path_factory.mktemp("two-ranks"),
                              nproc=2))

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return train()
    key = config_digest({"init": small_store["init"].rsplit("/", 1)[-1],
                         "datasets": [uri.rsplit("/", 1)[-1] for uri in small_store["datasets"]]})
    shared = tmp_path_factory.getbasetemp().parent / f"two-local-ranks-{key[:16]}.json"  # the workers' common parent
    with FileLock(f"{shared}.lock"):
        if not shared.is_file():
            shared.write_text(json.dumps(train()))
        return json.loads(shared.read_text())


def small_config(store: dict, run_id: str, **overrides) -> SftConfig:
    fields = dict(run_id=run_id, store=store["root"], init_checkpoint=store["init"], datasets=store["datasets"],
                  max_steps=8, global_batch_size=8, optimizer={"lr": 3e-3, "warmup_steps": 2},
                  heldout={"every": 4, "samples": 8}, checkpoint_every=100,
                  dsa={"dense_steps": 3, "indexer_warmup_steps": 2})
    fields.update(overrides)
    return SftConfig(**fields)


def run_sft(config: SftConfig, workdir: Path, nproc: int = 1) -> list[dict]:
    """Run the job to completion; its events, in order."""
    path = workdir / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    events = []
    run_stage_job(LocalLaunch(nproc=nproc, threads_per_proc=1),
        "stages.sft.train", path, lambda line: _collect(line, events))
    return events


def _collect(line: str, events: list[dict]) -> None:
    event = parse_event(line)
    if event is not None:
        events.append(event)


def start_sft(config: SftConfig, workdir: Path) -> subprocess.Popen:
    path = workdir / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    env = LocalLaunch(nproc=1, threads_per_proc=1).environment()
    return subprocess.Popen([sys.executable, "-m", "stages.sft.train", "--config", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def losses(events: list[dict]) -> list[float]:
    return [event["loss"] for event in events if event["event"] == "step"]


def router_biases(store, name: str, tmp_path) -> list[torch.Tensor]:
    """The routers' biases of a committed checkpoint, as plain transformers loads them."""
    folder = store.open(name).download(tmp_path / name.replace("/", "-"))
    return [router.e_score_correction_bias for router in routers(AutoModelForCausalLM.from_pretrained(str(folder)))]
