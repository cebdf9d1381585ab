"""GRPO with IcePop (SPEC "Reasoning RL", report Eq. 1): group advantages and the masked, clipped loss.

Three log-probabilities of every response token meet here:
- `logp_infer`: what the rollout engine sampled from (π_infer at θ_old, returned with the tokens);
- `logp_old`: the trainer's own recomputation at the same weights (π_train at θ_old, no gradient);
- `logp_new`: the trainer's current policy π_θ, with gradient.
IcePop weights each token by ρ = π_train/π_infer where 1/β ≤ ρ ≤ β and drops it (weight 0) outside:
tokens on which training and inference disagree that much carry no signal.
"""

from __future__ import annotations

import torch

from stages.common.icepop import IcePopSettings


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A_i = (R_i − mean_j R_j) / (std_j R_j + 1e-6) within each row (a group of G responses to one prompt).

    std is the sample standard deviation (as torch, verl and slime compute it); a group whose rewards
    are all equal gets advantage 0 everywhere.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [groups, G] with G ≥ 2, got shape {tuple(rewards.shape)}")
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    return (rewards - mean) / (std + 1e-6)


def zero_signal_groups(rewards: torch.Tensor) -> int:
    """Groups whose rewards are all equal: their advantages are 0, so they teach nothing."""
    return int((rewards == rewards[:, :1]).all(dim=1).sum())


def icepop_in_band(logp_old: torch.Tensor, logp_infer: torch.Tensor, settings: IcePopSettings) -> torch.Tensor:
    """Where 1/β ≤ π_train/π_infer ≤ β: the tokens IcePop keeps."""
    rho = torch.exp(logp_old - logp_infer).detach()
    return (rho >= 1.0 / settings.beta) & (rho <= settings.beta)


def grpo_icepop_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    logp_infer: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: IcePopSettings = IcePopSettings(),
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = −(1/N) Σ_i (1/|y_i|) Σ_t pop(ρ_t) · min(r_t A_i, clip(r_t, 1−ε_low, 1+ε_high) A_i).

    Token tensors are [N, T] over N responses (padding where `mask` is 0); `advantages` is [N], one per
    response (GRPO), or [N, T], one per token (on-policy distillation, SPEC Eq. 2).
    Returns the loss and statistics of the batch (fractions are over response tokens).
    """
    mask = mask.to(logp_new.dtype)
    lengths = mask.sum(dim=-1)
    if (lengths == 0).any():
        raise ValueError(f"response {int((lengths == 0).nonzero()[0])} has no tokens to train")
    rho = torch.exp(logp_old - logp_infer).detach()
    in_band = icepop_in_band(logp_old, logp_infer, settings)
    pop = torch.where(in_band, rho, torch.zeros_like(rho))
    ratio = torch.exp(logp_new - logp_old.detach())
    advantage = (advantages[:, None] if advantages.dim() == 1 else advantages).to(logp_new.dtype)
    clipped_ratio = ratio.clamp(1.0 - settings.eps_low, 1.0 + settings.eps_high)
    surrogate = torch.minimum(ratio * advantage, clipped_ratio * advantage)
    per_sequence = (pop * surrogate * mask).sum(dim=-1) / lengths
    loss = -per_sequence.mean()

    tokens = mask.sum()
    gap = (logp_old - logp_infer).abs()[mask.bool()]
    # A token is clipped when the clipped term is the one min() takes and it differs from the unclipped one.
    clipped = (clipped_ratio * advantage < ratio * advantage) & (clipped_ratio != ratio)
    stats = {
        "pop_masked_fraction": float(((~in_band).to(mask.dtype) * mask).sum() / tokens),
        "clip_fraction": float((clipped.to(mask.dtype) * mask).sum() / tokens),
        "logp_gap_mean": float(gap.mean()),
        "logp_gap_max": float(gap.max()),
    }
    return loss, stats
