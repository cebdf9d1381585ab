"""Agentic RL: `python -m stages.agentic_rl --config run.json`, fully asynchronous by default.

Engine replicas and task services run as their own processes; a background producer plays rollout
groups against them (stages/agentic_rollouts.py) while this loop trains on whichever groups have
finished. Each step takes `groups_per_step` usable groups (environment failures removed, stale samples
dropped, the G/2 refill rule applied), trains once with direct double-sided importance sampling
against the engines' own logprobs (stages/agentic_loss.py), and every `push_every` steps sends the
weights to every replica and resets the optimizer state.
"""

from __future__ import annotations

import collections
import time
from contextlib import ExitStack

import torch

from model.logprobs import next_token_logprobs
from model.presets import load_model
from rollout.process import EngineProcess
from rollout.task_services import TaskServices
from stages import checkpoints
from stages.agentic_data import agent_task_rows
from stages.agentic_loss import ImportanceSettings, centred_advantages, direct_is_loss
from stages.agentic_rl_config import AgenticRlConfig
from stages.agentic_rollouts import RolloutProducer, next_batch
from stages.rl_trainer import commit_rl_checkpoint, push_weights, rl_training_engine
from stages.rl_rollouts import padded_batch
from stages.sft_data import load_split
from stages.stage_inputs import stage_main, start_stage


def reset_optimizer_state(engine) -> None:
    """Forget AdamW's moments (SPEC: after each weight push), whatever DeepSpeed wrapped around it."""
    optimizer = engine.optimizer
    while not isinstance(optimizer, torch.optim.Optimizer) and hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    optimizer.state = collections.defaultdict(dict)


def run(config: AgenticRlConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):
        return stage
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    if dist.world_size > 1 and not config.engine_urls:
        raise ValueError("with several trainer ranks, give engine_urls: the ranks share the engine replicas")
    tokenizer = stage.tokenizer()
    task_rows = agent_task_rows(load_split(stage.datasets, "train", workdir), list(config.tasks), config.data_seed)
    events.emit("data", **{f"{task}_prompts": len(rows) for task, rows in task_rows.items()})
    model = load_model(stage.init_dir).eval()
    engine = rl_training_engine(model, lr=config.lr, warmup_steps=config.warmup_steps,
                                global_batch=config.groups_per_step * config.group_size * dist.world_size, world_size=dist.world_size,
                                zero_stage=config.zero_stage, grad_clip=config.grad_clip)
    start_step, history, resumed_from = checkpoints.resume_latest(
        engine, stage.store, config.resume_prefix, workdir / "resume", dist.local_rank == 0, events)
    # Resumed weights count as a push of their own: the first samples carry a version none before had.
    version = -(-start_step // config.push_every)
    settings = ImportanceSettings(config.eps_low, config.eps_high)

    with ExitStack() as stack:
        replicas = [] if config.engine_urls else [
            _launch(stack, EngineProcess(config.init_checkpoint, workdir / f"engine-{i}.log", seed=config.seed * 100 + i))
            for i in range(config.replicas)
        ]
        services = stack.enter_context(TaskServices(  # starts while the replicas load
            config.tasks, workdir, concurrency=config.concurrency, latency_median_s=config.env_latency_median_s,
            latency_sigma=config.env_latency_sigma))
        urls = config.engine_urls or [replica.wait_ready().base_url for replica in replicas]
        weights = None
        if start_step:  # the replicas started from the init checkpoint
            weights = (push_weights(engine, workdir, version, dist.is_main, deliver=None), version)
        producer = RolloutProducer(config, tokenizer, task_rows, urls, services.registry, dist.rank, start_step, weights)
        stack.callback(producer.stop)
        producer.start()
        producer.wait_ready(timeout_s=120)

        started, trained_samples = time.monotonic(), 0
        for step in range(start_step, config.max_steps):
            groups, failures, stale, dropped = next_batch(producer, config, version)
            rollouts = [r for results in groups for r in results]
            staleness = collections.Counter(version - min(r.weight_versions) for r in rollouts)
            step_started = time.monotonic()
            rewards = torch.tensor([[r.reward for r in results] for results in groups], dtype=torch.float32)
            advantages = centred_advantages(rewards).flatten()
            segments = [(row, float(a)) for r, a in zip(rollouts, advantages) for row in r.rows]
            batch = padded_batch([(row["prompt_ids"], row["response_ids"], row["loss_mask"], row["rollout_logprobs"])
                                  for row, _ in segments], tokenizer.pad_token_id)
            logits = engine(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            logp_new = next_token_logprobs(logits, batch.input_ids, config.temperature)
            loss, stats = direct_is_loss(logp_new, batch.logp_infer, torch.tensor([a for _, a in segments]),
                                         batch.response_mask, settings)
            engine.backward(loss)
            engine.step()
            trained_samples += len(rollouts)
            if (step + 1) % config.push_every == 0:
                version += 1
                push_weights(engine, workdir, version, dist.is_main,
                             (lambda path: producer.push_weights(path, version)) if dist.is_main else None)
                if config.reset_optimizer_on_push:
                    reset_optimizer_state(engine)
            if config.mode == "sync":
                producer.grant(config.groups_per_step)

            by_task = collections.defaultdict(list)
            for results in groups:
                by_task[results[0].spec.task].append(sum(r.reward for r in results) / len(results))
            record = {
                "step": step + 1, "loss": float(loss), "lr": engine.get_lr()[0],
                "reward_mean": float(rewards.mean()),
                **{f"success/{task}": sum(v) / len(v) for task, v in by_task.items()},
                **stats,
                "staleness": {str(k): v for k, v in sorted(staleness.items())},
                "stale_dropped": stale, "groups_dropped": dropped,
                "env_failures": dict(failures), "weight_version": version,
                "trained_tokens": batch.response_tokens, "train_s": time.monotonic() - step_started,
                "samples_per_s": trained_samples / (time.monotonic() - started),
                "replicas": producer.replica_stats(),
            }
            history.append(record)
            events.emit("step", total=config.max_steps, **record)
            if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.max_steps:
                uri = commit_rl_checkpoint(engine, tokenizer, config, stage, step + 1, history,
                                           checkpoints.step_artifact_name(config.resume_prefix, step + 1))
                events.emit("committed", step=step + 1, checkpoint=uri)

    uri = commit_rl_checkpoint(engine, tokenizer, config, stage, config.max_steps, history, config.output_name)
    events.emit("done", checkpoint=uri, resumed_from=resumed_from, already_committed=False)
    return uri


def _launch(stack: ExitStack, process: EngineProcess) -> EngineProcess:
    stack.callback(process.stop)
    process.launch()
    return process


def main(argv: list[str] | None = None) -> None:
    stage_main(AgenticRlConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
