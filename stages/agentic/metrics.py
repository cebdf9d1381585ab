"""An agentic RL step's record: loss, reward and success per task, how stale and healthy the trained
rollouts were, the replicas' load, throughput. This rank's numbers: each rank trains its own groups."""

from __future__ import annotations

import collections

import torch

from stages.agentic.rollouts import StepBatch
from stages.common.policy_step import PolicyStep
from stages.common.rl_batches import TrainBatch
from stages.common.training_engine import peak_memory_mb


def step_metrics(step: int, trained: PolicyStep, lr: float, rewards: torch.Tensor, drawn: StepBatch, difficulty: dict,
                 health: dict, version: int, batch: TrainBatch, replicas: dict, *, train_s: float, push_s: float,
                 samples_per_s: float) -> dict:
    """`rewards` [groups, G] of the trained groups of `drawn`; `difficulty` the pass-rate counts when difficulty
    is on; `health` the trained groups' `rollout_health` against the weights they were sampled for; `version`
    the weights after this step's push."""
    return {
        "step": step, "loss": trained.loss, "lr": lr, "reward_mean": float(rewards.mean()),
        **success_by_task(drawn.groups), **drawn.counts(), **difficulty,
        "samples_per_trained_sample": drawn.taken / len(drawn.groups), **trained.stats, **health,
        "weight_version": version, "trained_tokens": batch.response_tokens,
        "train_s": train_s, "push_s": push_s, "peak_memory_mb": peak_memory_mb(),
        "samples_per_s": samples_per_s, "replicas": replicas, **speculation(drawn.groups),
    }


def speculation(groups: list) -> dict[str, float]:
    """Speculative decoding's tokens per verification step over the groups' turns, where engines speculated."""
    steps = sum(r.verify_steps for results in groups for r in results)
    return {"spec_accept_length": sum(r.speculated_tokens for results in groups for r in results) / steps} if steps else {}


def success_by_task(groups: list) -> dict[str, float]:
    by_task = collections.defaultdict(list)
    for results in groups:
        by_task[results[0].spec.task].append(sum(r.reward for r in results) / len(results))
    return {f"success/{task}": sum(v) / len(v) for task, v in by_task.items()}


def rollout_health(groups: list, version: int, stale: int, dropped: int, failures: collections.Counter) -> dict:
    """How old the trained samples' weights were, and what was dropped on the way to this batch."""
    staleness = collections.Counter(version - min(r.weight_versions) for results in groups for r in results)
    return {"staleness": {str(k): v for k, v in sorted(staleness.items())}, "stale_dropped": stale,
            "groups_dropped": dropped, "env_failures": dict(failures)}
