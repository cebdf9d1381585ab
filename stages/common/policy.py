"""What every RL stage does with its policy: train it with the indexer frozen, and push its weights to the
rollout engines (the ORM trains its trunk on the same engine)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from fnmatch import fnmatch
from pathlib import Path

import torch

from model.dsa import install_dsa_indexers, set_dense_attention
from rollout.client import EngineClient
from rollout.process import EngineProcess
from stages.common.config import ComputeSettings, OptimizerSettings
from stages.common.distributed import Dist, barrier
from stages.common.hf_weights import save_hf
from stages.common.training_engine import StepShape, adapt_model, deepspeed_engine


def rl_training_engine(model, settings: OptimizerSettings, compute: ComputeSettings, shape: StepShape, world_size: int,
                       *, frozen: Sequence[str] = ()):
    """A DeepSpeed engine over the causal LM with sparse attention on and the DSA indexer frozen
    (trained during SFT; RL must not move which keys a query selects), and any parameter whose name
    matches a `frozen` glob; LoRA and activation checkpointing as `compute` asks; linear warm-up, then
    constant lr."""
    for indexer in install_dsa_indexers(model):
        indexer.requires_grad_(False)
    freeze_matching(model, frozen)
    adapt_model(model, compute)
    set_dense_attention(model, dense=False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.95))
    warmup = max(settings.warmup_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return deepspeed_engine(model, optimizer, scheduler, shape, world_size, settings, compute)


def freeze_matching(model, patterns: Sequence[str]) -> None:
    names = [name for name, _ in model.named_parameters()]
    for pattern in patterns:
        if not any(fnmatch(name, pattern) for name in names):
            raise ValueError(f"frozen: {pattern!r} matches no parameter of the model (e.g. {names[-1]!r})")
    for name, parameter in model.named_parameters():
        if any(fnmatch(name, pattern) for pattern in patterns):
            parameter.requires_grad_(False)


def weights_push_dir(workdir: Path) -> Path:
    """Where rank 0 of the job writes the weights its engines load (they are told to allow it)."""
    return workdir.parent / "push"


def push_weights(engine, workdir: Path, version: int, is_main: bool, deliver: Callable[[str], None] | None) -> str:
    """Rank 0 writes the weights (ZeRO-3's gathered, LoRA's merged); `deliver(path)` (where given) makes
    engines load them; every rank waits until all have, so nothing samples from the old weights afterwards
    (on-policy). Returns the weights' directory, which stays until the next push."""
    pushes = weights_push_dir(workdir)
    target = pushes / f"v{version}"
    save_hf(engine.module, target, is_main)
    barrier()
    if deliver is not None:
        deliver(str(target))
    barrier()
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
                                                   seed=config.seed * 1000 + dist.rank,
                                                   weights_dirs=[weights_push_dir(workdir)],
                                                   precision=config.compute.precision))
    if start_step:  # the engine serves the init checkpoint: give it the resumed weights
        push_weights(engine, workdir, start_step, dist.is_main, lambda path: client.update_weights(path, str(start_step)))
    elif config.engine_url:  # an engine we did not start may serve anything
        client.update_weights(config.init_checkpoint, weight_version="0")
    return client
