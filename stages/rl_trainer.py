"""What every RL stage does with its model: train it with the indexer frozen, push its weights to the
rollout engines, and commit checkpoints."""

from __future__ import annotations

import shutil
from fnmatch import fnmatch
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import torch

from infra.publish import data_input, published_contract
from model.dsa import install_dsa_indexers, set_dense_attention
from stages import checkpoints
from rollout.client import EngineClient
from rollout.process import EngineProcess
from stages.distributed import Dist, deepspeed_engine
from stages.lineage import reward_model_checkpoints, stage_lineage
from stages.stage_inputs import StageInputs, StageIO


def rl_training_engine(model, *, lr: float, warmup_steps: int, global_batch: int, world_size: int, zero_stage: int,
                       grad_clip: float, frozen: Sequence[str] = ()):
    """A DeepSpeed engine over the causal LM with sparse attention on and the DSA indexer frozen
    (trained during SFT; RL must not move which keys a query selects), and any parameter whose name
    matches a `frozen` glob; linear warm-up, then constant lr."""
    for indexer in install_dsa_indexers(model):
        indexer.requires_grad_(False)
    freeze_matching(model, frozen)
    set_dense_attention(model, dense=False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    warmup = max(warmup_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return deepspeed_engine(model, optimizer, scheduler, global_batch, world_size, zero_stage, grad_clip)


def freeze_matching(model, patterns: Sequence[str]) -> None:
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(fnmatch(name, pattern) for name in names):
            raise ValueError(f"frozen: {pattern!r} matches no parameter of the model (e.g. {names[-1]!r})")
    for name, parameter in model.named_parameters():
        if any(fnmatch(name, pattern) for pattern in patterns):
            parameter.requires_grad_(False)


def push_weights(engine, workdir: Path, version: int, is_main: bool, deliver: Callable[[str], None] | None) -> str:
    """Rank 0 writes the weights; `deliver(path)` (where given) makes engines load them; every rank
    waits until all have, so nothing samples from the old weights afterwards (on-policy). Returns the
    weights' directory, which stays until the next push."""
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
    return str(target)


def policy_engine(stack: ExitStack, config, engine, workdir: Path, dist: Dist, start_step: int) -> EngineClient:
    """The rollout engine of the policy being trained — `config.engine_url`, or one started here on the
    init checkpoint until `stack` closes — serving the trainer's weights at `start_step`."""
    if config.engine_url:
        client = EngineClient(config.engine_url)
        client.wait_until_healthy(30)
    else:
        client = stack.enter_context(EngineProcess(config.init_checkpoint, workdir / "engine.log",
                                                   seed=config.seed * 1000 + dist.rank))
    if start_step:  # the engine serves the init checkpoint: give it the resumed weights
        push_weights(engine, workdir, start_step, dist.is_main, lambda path: client.update_weights(path, str(start_step)))
    elif config.engine_url:  # an engine we did not start may serve anything
        client.update_weights(config.init_checkpoint, weight_version="0")
    return client


def end_of_step(record: dict, history: list[dict], events, config, commit: Callable[[int, str], str | None]) -> None:
    """Keep and announce the step's metrics, and every `checkpoint_every` steps (but the last, which the
    stage commits under its output name) commit resume state: `commit(step, artifact name)`."""
    history.append(record)
    events.emit("step", total=config.max_steps, **record)
    step = record["step"]
    if step % config.checkpoint_every == 0 and step < config.max_steps:
        uri = commit(step, checkpoints.step_artifact_name(config.resume_prefix, step))
        events.emit("committed", step=step, checkpoint=uri)


def commit_rl_checkpoint(engine, tokenizer, config: StageIO, stage: StageInputs, step: int, history: list[dict],
                         name: str, reward_refs: Sequence = (), teachers: Sequence = ()) -> str | None:
    """Save and commit the trainer's state at `step` with the stage's lineage (teachers: committed artifacts)."""
    local = stage.workdir.parent / "commit" / f"step-{step}"
    checkpoints.save_local(engine, engine.module, tokenizer, local, step, {"history": history}, stage.dist.is_main)
    lineage = stage_lineage(
        name=f"{config.stage_name} {config.run_id} step {step}", config=config.model_dump(mode="json"),
        seed=config.seed, init=stage.init, inputs=[data_input(d, None, published_contract(d)) for d in stage.datasets],
        provenance=config.provenance, reward_modules=list(reward_refs),
        reward_models=reward_model_checkpoints(list(reward_refs), stage.store), teachers=list(teachers),
    )
    return checkpoints.commit(stage.store, name, local, lineage, stage.dist.is_main)
