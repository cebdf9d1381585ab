"""On-policy distillation's advantage (SPEC Eq. 2): A_t = sg[log π_teacher(y_t) − log π_θ(y_t)] per token.

It enters the Eq. 1 objective in place of GRPO's group advantage (stages/common/icepop_loss.py, with the
IcePop gate and the clip kept); G = 1, so there is no group to normalize over.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def response_aligned(prompt_lengths: Sequence[int], values: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """[N, width] with each row's per-response-token `values` at its targets (as stages/common/rl_batches.py
    aligns the batch: target t predicts token t + 1), zeros elsewhere; `prompt_lengths[i]` is row i's prompt length."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for row, (prompt_length, row_values) in enumerate(zip(prompt_lengths, values, strict=True)):
        start = prompt_length - 1
        out[row, start:start + len(row_values)] = torch.tensor(row_values, dtype=torch.float32)
    return out


def distill_advantages(logp_teacher: torch.Tensor, logp_student: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T] per-token advantages, 0 off the response; no gradient flows through them."""
    return ((logp_teacher - logp_student.detach()) * mask).detach()


def reverse_kl_by_teacher(logp_teacher: torch.Tensor, logp_student: torch.Tensor, mask: torch.Tensor,
                          sources: Sequence[str], teachers: Sequence[str]) -> dict[str, float]:
    """{"kl/<teacher>": mean over its response tokens of log π_student − log π_teacher} for every teacher
    (0 for one with no row here, so every rank reports the same keys): the sampled estimate of
    KL(student ‖ teacher) per token, the quantity distillation drives down. `sources[i]` names row i's teacher."""
    gap = (logp_student.detach() - logp_teacher) * mask
    stats = {}
    for teacher in teachers:
        rows = torch.tensor([s == teacher for s in sources])
        stats[f"kl/{teacher}"] = float(gap[rows].sum() / mask[rows].sum().clamp(min=1))
    return stats
