"""Every training loss of the pipeline, each checked against hand-computed values in tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(token t+1 | ≤ t) for every position: [B, T-1], computed in float32."""
    logprobs = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def sft_loss(logits: torch.Tensor, input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean over samples of the masked token-mean NLL (SPEC.md): long and short samples weigh the same.

    loss_mask[b, t] says whether token t is trained; token t is predicted from position t-1.
    Samples with no trained token are left out of the mean.
    """
    nll = -token_logprobs(logits, input_ids)
    mask = loss_mask[:, 1:].to(nll.dtype)
    trained = mask.sum(dim=1)
    per_sample = (nll * mask).sum(dim=1) / trained.clamp(min=1.0)
    has_tokens = trained > 0
    return per_sample[has_tokens].mean() if has_tokens.any() else per_sample.sum() * 0.0
