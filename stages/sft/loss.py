"""The SFT loss, checked against hand-computed values in tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def trained_positions(loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sample, position) of every position whose next token is trained: token t is predicted at t-1."""
    samples, positions = loss_mask[:, 1:].nonzero(as_tuple=True)
    return samples, positions


def sft_loss(logits: torch.Tensor, targets: torch.Tensor, samples: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Mean over samples of the masked token-mean NLL (SPEC.md): long and short samples weigh the same.

    Takes the trained positions only (`trained_positions`): their logits [N, V], the tokens they
    predict [N] and the sample each belongs to [N]. A sample with no trained token is left out.
    """
    nll = -F.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    totals = nll.new_zeros(batch_size).index_add(0, samples, nll)
    counts = torch.bincount(samples, minlength=batch_size).to(nll.dtype)
    has_tokens = counts > 0
    return (totals[has_tokens] / counts[has_tokens]).mean() if has_tokens.any() else logits.sum() * 0.0
