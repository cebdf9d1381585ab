"""What every RL stage does with its policy: train it with the indexer frozen, and push its weights to the
rollout engines (the ORM trains its trunk on the same engine)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import torch

from model.dsa import install_dsa_indexers, set_dense_attention
from model.padding_free import padding_free_feed_forward
from rollout.engine_settings import WeightSync
from rollout.engines import EngineFleet, launch_engines
from rollout.weight_push import Broadcast, FleetWeightGroup, FromDisk, WeightDelivery, weight_payload
from stages.common.config import ComputeSettings, OptimizerSettings
from stages.common.distributed import Dist, barrier
from stages.common.hf_weights import gathered, merged_lora_state_dict, save_hf
from stages.common.mtp_training import trained_apart
from stages.common.training_engine import StepShape, adapt_model, deepspeed_engine


def rl_training_engine(model, settings: OptimizerSettings, compute: ComputeSettings, shape: StepShape, world_size: int,
                       *, frozen: Sequence[str] = ()):
    """A DeepSpeed engine over the causal LM with sparse attention on and the DSA indexer frozen
    (trained during SFT; RL must not move which keys a query selects), and any parameter whose name
    matches a `frozen` glob; LoRA and activation checkpointing as `compute` asks; linear warm-up, then
    constant lr. Each layer's feed-forward computes the batch's tokens alone (model/padding_free.py)."""
    padding_free_feed_forward(model)
    for indexer in install_dsa_indexers(model):
        indexer.requires_grad_(False)
    freeze_matching(model, frozen)
    adapt_model(model, compute)
    set_dense_attention(model, dense=False)
    apart = trained_apart(model)  # the MTP layer trains beside the engine (stages/common/mtp_training.py)
    trainable = [p for p in model.parameters() if p.requires_grad and id(p) not in apart]
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


@dataclass(frozen=True)
class PolicyEngine:
    fleet: EngineFleet  # fleet.client.generate(prompts, sampling)
    push: Callable[[int], None]  # the trainer's current weights to the engines, as this weight version


def policy_engine(stack: ExitStack, config, engine, workdir: Path, dist: Dist, start_step: int) -> PolicyEngine:
    """The rollout engines of the policy being trained (`config.engines`), until `stack` closes: running
    ones, shared by the trainer's ranks, or engines started here on the init checkpoint (each rank its own;
    the replicas generate at once, and never while the trainer trains: on-policy). They serve the trainer's
    weights at `start_step`; `push` sends them the trainer's weights after a step."""
    settings = config.engines
    fleet = launch_engines(stack, settings, config.init_checkpoint, workdir / f"rank-{dist.rank}",
                           seed=config.seed * 1000 + dist.rank * 100, weights_dirs=[weights_push_dir(workdir)],
                           precision=config.compute.precision, threads=engine_threads(settings.replicas),
                           serve_checkpoint=dist.is_main and not start_step)()
    push = weight_pusher(stack, settings.weight_sync, engine, fleet.client.update_weights, workdir, dist,
                         colocated=fleet.started, shared=not fleet.started)
    if start_step:  # started engines serve the init checkpoint, running ones anything: give them the resumed weights
        push(start_step)
    return PolicyEngine(fleet, push)


def engine_threads(computing_at_once: int) -> int | None:
    """CPU threads for an engine started beside this trainer rank when `computing_at_once` processes (the
    engines, and the trainer too when it trains while they generate) share the rank's cores (its torch
    threads, as the launcher set them); None, every core, for an engine that computes alone. Measured on 2
    cores, agentic RL with two replicas: each engine on every core made a step 3× slower than the cores
    shared out."""
    return max(1, torch.get_num_threads() // computing_at_once) if computing_at_once > 1 else None


def weight_pusher(stack: ExitStack, sync: WeightSync, engine, update: Callable[[WeightDelivery], None],
                  workdir: Path, dist: Dist, *, colocated: bool, shared: bool = True) -> Callable[[int], None]:
    """`push(version)` for an engine fleet: `update` gets the trainer's current weights (ZeRO-3's gathered,
    LoRA's merged) as `version` — broadcast over one group with every engine the fleet lists (formed again
    when they change), or written to disk for each to load — from rank 0 when the ranks share the fleet
    (`shared`), else from each rank to its own; no rank goes on before every engine serves them. `colocated`: the
    engines were started by this job (`group_backend`)."""
    pushes_here = dist.is_main or not shared
    if sync == "disk":
        return lambda version: push_weights(engine, workdir, version, dist.is_main,
                                            (lambda path: update(FromDisk(path, str(version)))) if pushes_here else None)
    group = FleetWeightGroup(group_backend(colocated))
    stack.callback(group.close)

    def push(version: int) -> None:
        with gathered(engine.module):
            if pushes_here:
                update(Broadcast(group, weight_payload(served_weights(engine.module), str(version))))
        barrier()

    return push


def served_weights(module) -> list[tuple[str, torch.Tensor]]:
    """What an engine serves of the trained module: LoRA merged into its base weights, else the state dict
    (inside `gathered` under ZeRO-3)."""
    return list((merged_lora_state_dict(module) or module.state_dict()).items())


def group_backend(colocated: bool) -> str:
    """NCCL between GPUs; gloo without a GPU, or where the engines were started beside the trainer: on its machine,
    they may share its GPU, and NCCL refuses two ranks of one group on one device ("Duplicate GPU detected")."""
    return "nccl" if torch.cuda.is_available() and not colocated else "gloo"
