"""Agentic RL's loss (SPEC "Agentic RL", report Eqs. 3-5): direct double-sided importance sampling.

Samples come from engines running older weights than the trainer's, so each token is weighted by
r_t = π_θ(a_t) / π_rollout(a_t), with π_rollout the probability the engine recorded when it sampled
(no old-policy recompute, no stored old checkpoints). Tokens whose ratio leaves (1 − ε_l, 1 + ε_h)
are dropped outright rather than clipped: they are too far off-policy to carry a trustworthy signal.
"""

from __future__ import annotations

import torch

from stages.agentic.importance import ImportanceSettings


def centred_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = R_i − mean_j R_j within each row (a group of responses to one task); no std division."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, G], got shape {tuple(rewards.shape)}")
    return rewards - rewards.mean(dim=1, keepdim=True)


def importance_mask(logp_new: torch.Tensor, logp_rollout: torch.Tensor, settings: ImportanceSettings) -> torch.Tensor:
    """1 where 1 − ε_l < r_t < 1 + ε_h (strictly), else 0; no gradient flows through it."""
    ratio = torch.exp(logp_new.detach() - logp_rollout)
    return ((ratio > 1.0 - settings.eps_low) & (ratio < 1.0 + settings.eps_high)).to(logp_new.dtype)


def direct_is_loss(
    logp_new: torch.Tensor,
    logp_rollout: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: ImportanceSettings = ImportanceSettings(),
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = −mean_t sg[f(r_t)] · r_t · A_t over the model-generated tokens (`mask` = 1).

    Token tensors are [N, T]; `advantages` is [N] (each response's advantage on all its tokens).
    The gradient of sg[mask]·r_t·A_t is mask·r_t·A_t·∇log π_θ: SPEC's f(r)·A·log π with f detached.
    """
    mask = mask.to(logp_new.dtype)
    tokens = mask.sum()
    if tokens == 0:
        raise ValueError("the batch has no model-generated tokens to train")
    kept = importance_mask(logp_new, logp_rollout, settings)
    ratio = torch.exp(logp_new - logp_rollout)
    loss = -(kept * ratio * advantages[:, None].to(logp_new.dtype) * mask).sum() / tokens
    with torch.no_grad():
        gap = (logp_new - logp_rollout).abs()[mask.bool()]
        stats = {
            "is_masked_fraction": float(((1 - kept) * mask).sum() / tokens),
            "logp_gap_mean": float(gap.mean()),
            "logp_gap_max": float(gap.max()),
        }
    return loss, stats
