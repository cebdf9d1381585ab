"""Agentic RL: `python -m stages.agentic.train --config run.json`, fully asynchronous by default.

Engine replicas and task services run as their own processes; a background producer plays rollout
groups against them (stages/agentic/rollouts.py) while this loop trains on whichever groups have
finished. Each step takes `groups_per_step` usable groups (environment failures removed, stale samples
dropped, the G/2 refill rule applied), trains once with direct double-sided importance sampling
against the engines' own logprobs (stages/agentic/loss.py), and every `push_every` steps sends the
weights to every replica and resets the optimizer state.
"""

from __future__ import annotations

import collections
from contextlib import ExitStack

import torch

from model.presets import load_model
from model.routing import ReplayedRouting, RoutingLayout
from rollout.agents.task_services import TaskServices
from rollout.engines import launch_engines
from rollout.weight_push import FromDisk
from stages.agentic.config import AgenticRlConfig
from stages.agentic.importance import ImportanceSettings
from stages.agentic.loss import centred_advantages, direct_is_loss, importance_mask
from stages.agentic.metrics import rollout_health, step_metrics
from stages.agentic.record import agentic_rows
from stages.agentic.rollouts import RolloutProducer, next_batch
from stages.common.agent_tasks import agent_task_rows, load_task_split
from stages.common.checkpointer import StageCheckpointer
from stages.common.difficulty import PassRates, difficulty_metrics, observe_everywhere, pass_rates_for
from stages.common.finite import FiniteSteps
from stages.common.inputs import StageInputs
from stages.common.mtp_training import mtp_training
from stages.common.policy import (
    engine_threads,
    push_weights,
    rl_training_engine,
    weight_pusher,
    weights_push_dir,
)
from stages.common.policy_step import LossOf, policy_step
from stages.common.rl_batches import TrainBatch, engine_batch
from stages.common.router_balance import RouterBalance
from stages.common.stage_main import stage_main
from stages.common.timing import timed
from stages.common.training_engine import step_shape


def train(config: AgenticRlConfig, stage: StageInputs) -> str:
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    if dist.world_size > 1 and not config.engines.running:
        raise ValueError("with several trainer ranks, give engines.engine_urls or engines.router_url: the ranks share "
                         "the engine replicas")
    tokenizer = stage.tokenizer()
    task_rows = agent_task_rows(load_task_split(stage.datasets, "train", workdir), list(config.tasks), config.data_seed)
    events.emit("data", **{f"{task}_prompts": len(rows) for task, rows in task_rows.items()})
    model = load_model(stage.init_dir).eval()
    balance = RouterBalance(model, config.router_balancing)
    routing = RoutingLayout.of(model)  # a MoE policy's engines return each position's experts
    replayed = ReplayedRouting(model) if routing is not None else None
    # Each rank trains its own groups; a step's micro-batches hold segments (rollout@1 rows), as many as
    # its rollouts have turns.
    shape = step_shape(config.groups_per_step * config.group_size * dist.world_size, dist.world_size,
                       config.compute.micro_batch_size, "groups_per_step × group_size")
    engine = rl_training_engine(model, config.optimizer, config.compute, shape, dist.world_size)
    mtp = mtp_training(model, config.mtp, config.optimizer)
    pass_rates = pass_rates_for(config.difficulty, config.group_size)
    checkpointer = StageCheckpointer(config, stage, engine, engine.module, tokenizer, record=config.record,
                                     parts={"pass_rates": pass_rates} if pass_rates else None)
    start_step = checkpointer.resume()
    finite = FiniteSteps(config.optimizer.nonfinite_skips, config.stage_name)
    # Resumed weights count as a push of their own: the first samples carry a version none before had.
    version = -(-start_step // config.push_every)

    with ExitStack() as stack:
        producer = start_rollouts(stack, config, stage, engine, tokenizer, task_rows, start_step, version, pass_rates,
                                  routed_experts=routing is not None)
        started_here = not (config.engines.engine_urls or config.engines.router_url)
        push = weight_pusher(stack, config.engines.weight_sync, engine, producer.update_weights, workdir, dist,
                             colocated=started_here)
        run, trained_samples = stack.enter_context(timed()), 0
        for step in range(start_step, config.max_steps):
            drawn = next_batch(producer, config, version)
            groups = drawn.groups
            if pass_rates is not None:  # every rank's groups taken, trained on or not: the ranks' rates stay alike
                observe_everywhere(pass_rates, drawn.observed)
            difficulty = difficulty_metrics(pass_rates, drawn.drawn_outside_band)
            health = rollout_health(groups, version, drawn.stale, drawn.dropped, drawn.failures)  # before the push
            if not groups:  # no group with signal within the cap: no update, nothing to push
                if config.mode == "sync":
                    producer.grant(config.groups_per_step)
                checkpointer.end_of_step({"step": step + 1, "lr": engine.get_lr()[0], **drawn.counts(), **difficulty,
                                          **health, "updated": 0, "weight_version": version}
                                         | balance.after_step(last=step + 1 == config.max_steps))
                continue
            with timed() as training:
                rewards = torch.tensor(drawn.rewards, dtype=torch.float32)
                rollout_advantages = centred_advantages(rewards).flatten()
                batch, advantages = segments_batch(groups, rollout_advantages, tokenizer.pad_token_id, routing,
                                                   config.routing_replay)
                trained = policy_step(
                    engine, batch, config.compute.micro_batch_size, config.sampling.temperature, finite, step + 1,
                    importance_loss_of(advantages, config.objective),
                    mean_over="tokens", routing=replayed, replay=config.routing_replay, mtp=mtp)
                expert_load = balance.after_step(last=step + 1 == config.max_steps)
                samples = agentic_rows(config.stage_name, step + 1, groups, drawn.rewards, rollout_advantages,
                                       trained.logp_old, importance_mask(trained.logp_old, batch.logp_infer,
                                                                         config.objective), version)
            trained_samples += sum(len(results) for results in groups)
            push_s = 0.0  # a step between pushes spends nothing on one
            if (step + 1) % config.push_every == 0:
                version += 1
                with timed() as pushing:
                    push(version)
                push_s = pushing.seconds
                if config.reset_optimizer_on_push:
                    reset_optimizer_state(engine)
            if config.mode == "sync":
                producer.grant(config.groups_per_step)
            checkpointer.end_of_step(
                step_metrics(step + 1, trained, engine.get_lr()[0], rewards, drawn, difficulty, health, version, batch,
                             producer.replica_stats(), train_s=training.seconds, push_s=push_s,
                             samples_per_s=trained_samples / run.seconds) | expert_load,
                samples=samples)
    return checkpointer.finish()


def start_rollouts(stack: ExitStack, config: AgenticRlConfig, stage: StageInputs, engine, tokenizer, task_rows,
                   start_step: int, version: int, pass_rates: PassRates | None,
                   routed_experts: bool) -> RolloutProducer:
    """The engines (`config.engines`), the task services and the producer playing groups on them (drawing
    prompts by `pass_rates` when difficulty is on, asking for each position's experts with `routed_experts`),
    all stopped when `stack` closes; a resumed run's weights reach the engines first."""
    dist, workdir = stage.dist, stage.workdir
    # Asynchronous: the replicas generate while the trainer trains, so the cores are shared by all of them.
    ready = launch_engines(stack, config.engines, config.init_checkpoint, workdir, seed=config.seed * 100,
                           weights_dirs=[weights_push_dir(workdir)], precision=config.compute.precision,
                           threads=engine_threads(config.engines.replicas + 1),
                           serve_checkpoint=dist.is_main and not start_step)
    services = stack.enter_context(TaskServices(  # starts while the replicas load
        config.tasks, workdir, concurrency=config.concurrency, latency_median_s=config.env_latency_median_s,
        latency_sigma=config.env_latency_sigma))
    fleet = ready()
    initial_weights = None
    if start_step:  # the replicas started from the init checkpoint: the resumed weights reach them once, by disk
        initial_weights = FromDisk(push_weights(engine, workdir, version, dist.is_main, deliver=None), str(version))
    producer = RolloutProducer(config, tokenizer, task_rows, fleet.url, fleet.routed, services.registry, dist.rank,
                               start_step, initial_weights, pass_rates, routed_experts)
    stack.callback(producer.stop)
    producer.start()
    producer.wait_ready(timeout_s=120)
    return producer


def segments_batch(groups: list, advantages: torch.Tensor, pad_id: int, routing: RoutingLayout | None = None,
                   replay: bool = False) -> tuple[TrainBatch, torch.Tensor]:
    """Every segment (rollout@1 row) of every rollout as one padded batch, each with its rollout's advantage;
    with `routing`, the experts the engine routed each segment's positions to (all of them, with `replay`)."""
    rollouts = [r for results in groups for r in results]
    segments = [(row, float(a)) for r, a in zip(rollouts, advantages, strict=True) for row in r.rows]
    batch = engine_batch([(row["prompt_ids"], row["response_ids"], row["loss_mask"], row["rollout_logprobs"])
                          for row, _ in segments], [row.get("routed_experts") for row, _ in segments], pad_id,
                         routing, replay, "segment")
    return batch, torch.tensor([a for _, a in segments])


def importance_loss_of(advantages: torch.Tensor, objective: ImportanceSettings) -> LossOf:
    """The direct double-sided IS loss of a micro-batch of segments (`policy_step`), each with its rollout's advantage."""
    def loss_of(rows: slice, micro: TrainBatch, logp_new: torch.Tensor):
        return direct_is_loss(logp_new, micro.logp_infer, advantages[rows].to(logp_new.device), micro.response_mask,
                              objective)
    return loss_of


def reset_optimizer_state(engine) -> None:
    """Forget AdamW's moments (SPEC: after each weight push), whatever DeepSpeed wrapped around it."""
    optimizer = engine.optimizer
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    optimizer.state = collections.defaultdict(dict)


def main(argv: list[str] | None = None) -> None:
    stage_main(AgenticRlConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()

