"""The ORM's Bradley–Terry loss and pairwise accuracy, checked against hand-computed values in tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of -log σ(r_chosen - r_rejected): the chosen reply's win probability under the
    Bradley–Terry model, maximized. `logsigmoid` keeps a large margin finite."""
    return -F.logsigmoid(chosen.float() - rejected.float()).mean()


def pairwise_accuracy(chosen: torch.Tensor, rejected: torch.Tensor) -> float:
    """The share of pairs whose chosen reply scores strictly higher (a tie counts as wrong)."""
    return (chosen > rejected).float().mean().item() if chosen.numel() else float("nan")
