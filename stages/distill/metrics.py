"""A distillation step's record: loss, the student's reverse KL to each teacher, the agent episodes it
played, throughput; averaged over ranks (counts summed)."""

from __future__ import annotations

import torch

from rollout.agents.orchestrator import RolloutResult
from stages.common.distributed import Dist, all_mean
from stages.common.policy_step import PolicyStep
from stages.common.rl_batches import TrainBatch
from stages.common.training_engine import peak_memory_mb
from stages.distill.loss import distill_advantages, reverse_kl_by_teacher
from stages.distill.rows import StudentRow


def step_metrics(step: int, trained: PolicyStep, lr: float, batch: TrainBatch, rows: list[StudentRow],
                 logp_teacher: torch.Tensor, teachers: list[str], episodes: list[RolloutResult] | None, dist: Dist, *,
                 rollout_s: float, teacher_s: float, train_s: float) -> dict:
    """`episodes` is None when no teacher poses agent episodes (then the record has no episode metrics)."""
    advantages = distill_advantages(logp_teacher, trained.logp_old, batch.response_mask)
    kl = reverse_kl_by_teacher(logp_teacher, trained.logp_old, batch.response_mask, [r.teacher for r in rows], teachers)
    return {
        "step": step, "loss": all_mean(trained.loss), "lr": lr,
        "reverse_kl": all_mean(float(-(advantages.sum() / batch.response_mask.sum()))),
        **{name: all_mean(value) for name, value in kl.items()},
        **{name: all_mean(value) for name, value in trained.stats.items()},
        "response_length": all_mean(batch.response_tokens / len(rows)),
        **(episode_metrics(episodes, dist) if episodes is not None else {}),
        **throughput(batch, rollout_s, teacher_s, train_s, dist),
        # The student sampled with the weights of the step before this one's update.
        "weight_version": step - 1, "peak_memory_mb": all_mean(peak_memory_mb()),
    }


def episode_metrics(episodes: list[RolloutResult], dist: Dist) -> dict:
    return {"episodes": round(all_mean(len(episodes)) * dist.world_size),
            "episode_turns": all_mean(sum(e.turns for e in episodes) / max(len(episodes), 1)),
            "env_failures": round(all_mean(sum(e.status == "env_error" for e in episodes)) * dist.world_size)}


def throughput(batch: TrainBatch, rollout_s: float, teacher_s: float, train_s: float, dist: Dist) -> dict:
    sampled = batch.response_tokens
    return {"trained_tokens": int(all_mean(sampled) * dist.world_size),
            "rollout_tokens_per_s": all_mean(sampled / rollout_s) * dist.world_size,
            "teacher_tokens_per_s": all_mean(float(batch.attention_mask.sum()) / teacher_s) * dist.world_size,
            "train_tokens_per_s": all_mean(batch.input_ids.numel() / train_s) * dist.world_size}


def accept_length_over_ranks(tokens: int, steps: int, dist: Dist) -> dict:
    """Speculative decoding's tokens per verification step over every rank's replies and episode turns (SGLang's
    spec_accept_length), where the student's engine speculated."""
    tokens, steps = all_mean(tokens) * dist.world_size, all_mean(steps) * dist.world_size  # every rank calls both
    return {"spec_accept_length": tokens / steps} if steps else {}
