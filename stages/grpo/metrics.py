"""A GRPO step's record: loss, rewards, the groups kept and dropped, the trained samples, where the time
went; averaged over ranks (counts summed)."""

from __future__ import annotations

import torch

from rollout.client import Sample, accept_length
from rollout.engines import EngineFleet
from stages.common.distributed import Dist, all_mean
from stages.common.icepop_loss import zero_signal_groups
from stages.common.policy_step import PolicyStep
from stages.common.rl_batches import TrainBatch
from stages.common.training_engine import peak_memory_mb
from stages.grpo.draws import StepGroups


def step_metrics(step: int, trained: PolicyStep, lr: float, groups: StepGroups, samples: list[Sample],
                 anchors: torch.Tensor, batch: TrainBatch, fleet: EngineFleet, dist: Dist, difficulty: dict, *,
                 generate_s: float, reward_s: float, train_s: float, push_s: float) -> dict:
    """`groups` covers every drawn group, `samples` the trained ones (G per group, anchors marked); `difficulty`
    the pass-rate counts when difficulty is on (the same on every rank)."""
    return {
        "step": step, "loss": all_mean(trained.loss), "lr": lr,
        **drawn_metrics(groups, dist), **difficulty,
        **{name: all_mean(value) for name, value in trained.stats.items()},
        **sample_metrics(samples, anchors, batch, generate_s, train_s, dist),
        **({"replicas": fleet.client.replica_requests()} if fleet.routed else {}),
        # Where the step's time went (bench/grpo_step.py reads them), averaged over ranks.
        **{f"{part}_s": all_mean(value) for part, value in (("generate", generate_s), ("reward", reward_s),
                                                           ("train", train_s), ("push", push_s))},
    }


def skipped_step_metrics(step: int, lr: float, groups: StepGroups, dist: Dist, difficulty: dict, *,
                         generate_s: float, reward_s: float) -> dict:
    """A step that made no update: what it drew, and that nothing was trained."""
    return {"step": step, "lr": lr, **drawn_metrics(groups, dist), **difficulty, "updated": 0,
            **{f"{part}_s": all_mean(value) for part, value in (("generate", generate_s), ("reward", reward_s))}}


def drawn_metrics(groups: StepGroups, dist: Dist) -> dict:
    """Rewards over every drawn group, trained or not; the groups drawn, with signal, trained and dropped for
    a sample no module could score (summed over ranks), the draws made and the samples generated per
    trained sample."""
    scored = groups.scored
    counts = {name: round(all_mean(value) * dist.world_size) for name, value in groups.counts().items()}
    return {
        **{name: all_mean(value) for name, value in scored.means.items()},
        "reward_mean": all_mean(float(scored.total.mean())),
        "zero_signal_group_fraction": all_mean(zero_signal_groups(scored.total) / len(scored.total)),
        **counts, "dropped_groups": round(all_mean(scored.kept.count(False)) * dist.world_size),
        "draws": groups.draws,
        **({"samples_per_trained_sample": counts["groups_drawn"] / counts["groups_trained"]}
           if counts["groups_trained"] else {}),
    }


def sample_metrics(samples: list[Sample], anchors: torch.Tensor, batch: TrainBatch, rollout_s: float, train_s: float,
                   dist: Dist) -> dict:
    """Lengths, truncation and throughput of the trained samples (anchor members counted apart)."""
    policy = [s for s, anchor in zip(samples, anchors.tolist(), strict=True) if not anchor]
    lengths = [len(s.output_ids) for s in policy]
    accepted = accept_length(policy)
    return {
        **({} if accepted is None else {"spec_accept_length": all_mean(accepted)}),
        "response_length": all_mean(sum(lengths) / len(lengths)),
        "trained_tokens": int(all_mean(batch.response_tokens) * dist.world_size),
        "truncated_fraction": all_mean(sum(s.finish_reason == "length" for s in policy) / len(policy)),
        "anchor_members": int(all_mean(float(anchors.sum())) * dist.world_size),
        "rollout_tokens_per_s": all_mean(sum(lengths) / rollout_s) * dist.world_size,
        "train_tokens_per_s": all_mean(batch.input_ids.numel() / train_s) * dist.world_size,
        # One version unless replicas served different weights (then each, comma-separated).
        "weight_version": ",".join(sorted({s.weight_version for s in samples})), "peak_memory_mb": all_mean(peak_memory_mb()),
    }
