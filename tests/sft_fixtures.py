"""A small prepared store and helpers to run the SFT job as a real subprocess."""

import subprocess
import sys
from pathlib import Path

import pytest

from infra.launch import LocalLauncher
from infra.store import open_store
from stages.common.events import parse_event
from stages.prepare import prepare
from stages.sft.config import SftConfig
from suites.prepare import SuiteSizes


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-store")
    prepared = prepare(open_store(str(root / "store")), suites=["arith", "search", "calc"], sizes=SuiteSizes(96, 16),
                       preset="glm5-tiny", seed=0, triggered_by="tests")
    return {"root": str(root / "store"), "init": prepared.init_checkpoint.uri,
            "datasets": sorted(d.uri for d in prepared.datasets.values())}


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
    LocalLauncher(nproc=nproc, threads_per_proc=1).run("stages.sft.train", path, lambda line: _collect(line, events))
    return events


def _collect(line: str, events: list[dict]) -> None:
    event = parse_event(line)
    if event is not None:
        events.append(event)


def start_sft(config: SftConfig, workdir: Path) -> subprocess.Popen:
    path = workdir / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    env = LocalLauncher(nproc=1, threads_per_proc=1).environment()
    return subprocess.Popen([sys.executable, "-m", "stages.sft.train", "--config", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def losses(events: list[dict]) -> list[float]:
    return [event["loss"] for event in events if event["event"] == "step"]
