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

from infra.ports import free_port
from model.dsa import install_dsa_indexers, set_dense_attention
from rollout.client import EngineClient
from rollout.fleet_client import FleetClient
from rollout.process import EngineProcess, RouterProcess
from rollout.weight_push import (
    Broadcast,
    DistributedWeightPush,
    FleetWeightGroup,
    FromDisk,
    WeightDelivery,
    address_reachable_from,
)
from stages.common.config import ComputeSettings, OptimizerSettings, WeightSync
from stages.common.distributed import Dist, barrier
from stages.common.hf_weights import gathered, merged_lora_state_dict, save_hf
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


@dataclass(frozen=True)
class PolicyEngine:
    client: EngineClient | FleetClient  # generate(prompts, sampling) either way
    push: Callable[[int], None]  # the trainer's current weights to the engines, as this weight version


def policy_engine(stack: ExitStack, config, engine, workdir: Path, dist: Dist, start_step: int) -> PolicyEngine:
    """The rollout engines of the policy being trained, until `stack` closes: SGLang's router at
    `config.router_url` (shared by the trainer's ranks), the engine at `config.engine_url`, or
    `config.replicas` engines started here on the init checkpoint (each rank its own; behind SGLang's router
    when more than one). They serve the trainer's weights at `start_step`; `push` sends them the trainer's
    weights after a step (`config.weight_sync`)."""
    if config.router_url or (config.replicas > 1 and not config.engine_url):
        return _policy_fleet(stack, config, engine, workdir, dist, start_step)
    if config.engine_url:
        client = EngineClient(config.engine_url)
        client.wait_until_healthy(30)
    else:
        client = stack.enter_context(EngineProcess(config.init_checkpoint, workdir / "engine.log",
                                                   seed=config.seed * 1000 + dist.rank,
                                                   weights_dirs=[weights_push_dir(workdir)],
                                                   precision=config.compute.precision))
    push = weight_pusher(stack, config.weight_sync, engine, client, workdir, dist)
    if start_step:  # the engine serves the init checkpoint: give it the resumed weights
        push(start_step)
    elif config.engine_url:  # an engine we did not start may serve anything
        client.update_weights(config.init_checkpoint, weight_version="0")
    return PolicyEngine(client, push)


def _policy_fleet(stack: ExitStack, config, engine, workdir: Path, dist: Dist, start_step: int) -> PolicyEngine:
    if config.router_url:
        fleet = FleetClient(config.router_url)
    else:
        # The replicas generate at once, and never while the trainer trains (on-policy).
        urls = replicas_started(stack, config.init_checkpoint, config.replicas, workdir / f"rank-{dist.rank}",
                                seed=config.seed * 1000 + dist.rank * 100, precision=config.compute.precision,
                                weights_dirs=[weights_push_dir(workdir)], threads=engine_threads(config.replicas))
        fleet = FleetClient(stack.enter_context(RouterProcess(urls, workdir / f"router-{dist.rank}.log")))
    stack.callback(fleet.close)
    push = fleet_weight_pusher(stack, config.weight_sync, engine, fleet.update_weights, workdir, dist,
                               shared=bool(config.router_url))
    if start_step:
        push(start_step)
    elif config.router_url and dist.is_main:  # engines we did not start may serve anything
        fleet.update_weights(FromDisk(config.init_checkpoint, "0"))
    return PolicyEngine(fleet, push)


def engine_threads(computing_at_once: int) -> int:
    """CPU threads for an engine started beside this trainer rank when `computing_at_once` processes (the
    engines, and the trainer too when it trains while they generate) share the rank's cores (its torch
    threads, as the launcher set them). Measured on 2 cores, agentic RL with two replicas: each engine on
    every core made a step 3× slower than the cores shared out."""
    return max(1, torch.get_num_threads() // computing_at_once)


def replicas_started(stack: ExitStack, checkpoint: str, count: int, log_dir: Path, *, seed: int, precision: str,
                     weights_dirs: list[Path], threads: int | None = None) -> list[str]:
    """The URLs of `count` engines on `checkpoint`, started at once and stopped when `stack` closes."""
    log_dir.mkdir(parents=True, exist_ok=True)
    engines = []
    for i in range(count):
        process = EngineProcess(checkpoint, log_dir / f"engine-{i}.log", seed=seed + i, weights_dirs=weights_dirs,
                                precision=precision, threads=threads)
        stack.callback(process.stop)
        process.launch()
        engines.append(process)
    return [process.wait_ready().base_url for process in engines]


def weight_pusher(stack: ExitStack, sync: WeightSync, engine, client: EngineClient, workdir: Path,
                  dist: Dist) -> Callable[[int], None]:
    """`push(version)`: every rank's engine serves the trainer's current weights (ZeRO-3's gathered, LoRA's
    merged) as `version` before any rank goes on. Distributed: each rank broadcasts them to its own engine
    over a group of the two (gloo on CPUs, NCCL on GPUs). Disk: rank 0 writes them, every engine loads them."""
    if sync == "disk":
        return lambda version: push_weights(engine, workdir, version, dist.is_main,
                                            lambda path: client.update_weights(path, str(version)))
    group = DistributedWeightPush([client.base_url], backend=group_backend(),
                                  master_address=address_reachable_from(client.base_url), master_port=free_port())
    stack.callback(group.close)

    def push(version: int) -> None:
        with gathered(engine.module):
            group.push(served_weights(engine.module), str(version))
        barrier()

    return push


def fleet_weight_pusher(stack: ExitStack, sync: WeightSync, engine, update: Callable[[WeightDelivery], None],
                        workdir: Path, dist: Dist, *, shared: bool = True) -> Callable[[int], None]:
    """`push(version)` for a fleet of replicas behind a router: `update` gets the trainer's current weights
    as `version` — broadcast over one group with every replica the router lists (formed again when they
    change), or written to disk for each to load — from rank 0 when the ranks share the fleet (`shared`),
    else from each rank to its own; no rank goes on before every replica serves them."""
    pushes_here = dist.is_main or not shared
    if sync == "disk":
        return lambda version: push_weights(engine, workdir, version, dist.is_main,
                                            (lambda path: update(FromDisk(path, str(version)))) if pushes_here else None)
    group = FleetWeightGroup(group_backend())
    stack.callback(group.close)

    def push(version: int) -> None:
        with gathered(engine.module):
            if pushes_here:
                update(Broadcast(group, served_weights(engine.module), str(version)))
        barrier()

    return push


def served_weights(module) -> list[tuple[str, torch.Tensor]]:
    """What an engine serves of the trained module: LoRA merged into its base weights, else the state dict
    (inside `gathered` under ZeRO-3)."""
    return list((merged_lora_state_dict(module) or module.state_dict()).items())


def group_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"
