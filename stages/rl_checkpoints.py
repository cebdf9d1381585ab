"""What every RL stage does with its weights: push them to the rollout engines, and commit checkpoints."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from data_contracts import CHAT_V1
from infra.publish import data_input
from stages import checkpoints
from stages.lineage import stage_lineage
from stages.stage_inputs import StageInputs, StageIO


def push_weights(engine, workdir: Path, version: int, is_main: bool, deliver: Callable[[str], None] | None) -> None:
    """Rank 0 writes the weights; `deliver(path)` (where given) makes engines load them; every rank
    waits until all have, so nothing samples from the old weights afterwards (on-policy)."""
    pushes = workdir.parent / "push"
    target = pushes / f"v{version}"
    if is_main:
        engine.module.save_pretrained(target)
    checkpoints.barrier()
    if deliver is not None:
        deliver(str(target))
    checkpoints.barrier()
    if is_main:
        for old in pushes.iterdir():
            if old != target:
                shutil.rmtree(old)


def commit_rl_checkpoint(engine, tokenizer, config: StageIO, stage: StageInputs, step: int, history: list[dict],
                         name: str, reward_refs: Sequence = ()) -> str | None:
    """Save and commit the trainer's state at `step` with the stage's lineage."""
    local = stage.workdir.parent / "commit" / f"step-{step}"
    checkpoints.save_local(engine, engine.module, tokenizer, local, step, {"history": history}, stage.dist.is_main)
    lineage = stage_lineage(
        name=f"{config.stage_name} {config.run_id} step {step}", config=config.model_dump(mode="json"),
        seed=config.seed, init=stage.init, inputs=[data_input(d, None, CHAT_V1.id) for d in stage.datasets],
        provenance=config.provenance, reward_modules=list(reward_refs),
    )
    return checkpoints.commit(stage.store, name, local, lineage, stage.dist.is_main)
