"""Committed checkpoints of a running trainer: save, commit, find the latest, and resume from it.

A checkpoint is a Hugging Face directory (safetensors + config + tokenizer) with DeepSpeed's resume
state under `deepspeed/` and the trainer's own state in `trainer_state.json`. Only rank 0 commits; a
crash before `_SUCCESS` leaves nothing a reader or a resume would pick up.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch.distributed as dist

from data_contracts.lineage import Lineage
from infra.publish import publish_directory
from infra.store import ArtifactStore, CommittedArtifact

DEEPSPEED_DIR = "deepspeed"
TRAINER_STATE = "trainer_state.json"
STEP_NAME = re.compile(r"step-(\d+)$")


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def save_local(engine, model, tokenizer, local_dir: Path, step: int, trainer_state: dict, is_main: bool) -> None:
    """Every rank writes its DeepSpeed shards; rank 0 adds `model`'s Hugging Face files (the engine may
    train a wrapper around it)."""
    if is_main and local_dir.exists():
        shutil.rmtree(local_dir)
    barrier()
    engine.save_checkpoint(str(local_dir / DEEPSPEED_DIR), tag=f"step-{step}", client_state={"step": step})
    if is_main:
        model.save_pretrained(local_dir)
        tokenizer.save_pretrained(local_dir)
        (local_dir / TRAINER_STATE).write_text(json.dumps({**trainer_state, "step": step}, indent=2))
    barrier()


def commit(store: ArtifactStore, name: str, local_dir: Path, lineage: Lineage, is_main: bool) -> str | None:
    uri = publish_directory(store, name, local_dir, lineage).uri if is_main else None
    barrier()
    return uri


def step_artifact_name(prefix: str, step: int) -> str:
    return f"{prefix}step-{step:06d}"


def latest_committed(store: ArtifactStore, prefix: str) -> tuple[int, CommittedArtifact] | None:
    steps = []
    for name in store.list_committed(prefix):
        match = STEP_NAME.search(name)
        if match and name.startswith(prefix):
            steps.append((int(match.group(1)), name))
    if not steps:
        return None
    step, name = max(steps)
    return step, store.open(name)


def restore(engine, artifact: CommittedArtifact, local_dir: Path, step: int, is_local_main: bool) -> dict:
    """Load model, optimizer and scheduler state of `artifact` into the engine; returns the trainer state."""
    if is_local_main:
        if local_dir.exists():
            shutil.rmtree(local_dir)
        artifact.download(local_dir)
    barrier()
    engine.load_checkpoint(str(local_dir / DEEPSPEED_DIR), tag=f"step-{step}")
    return json.loads((local_dir / TRAINER_STATE).read_text())


def resume_latest(engine, store: ArtifactStore, prefix: str, local_dir: Path, is_local_main: bool, events) -> tuple[int, list[dict], str | None]:
    """(step, history, checkpoint URI) of the last committed step restored into `engine`; (0, [], None) if none."""
    latest = latest_committed(store, prefix)
    if latest is None:
        return 0, [], None
    step, artifact = latest
    state = restore(engine, artifact, local_dir, step, is_local_main)
    events.emit("resumed", step=step, checkpoint=artifact.uri)
    return step, state["history"], artifact.uri
