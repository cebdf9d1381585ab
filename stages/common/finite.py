"""Finite or nothing. A step whose loss (or, where the trainer can see it, gradient norm) is not finite
is skipped without an update, up to `optimizer.nonfinite_skips` such steps; the next one stops the stage
with an error naming the step. A checkpoint with a non-finite parameter is never committed."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from stages.common.distributed import all_mean


class NonFiniteError(RuntimeError):
    pass


class FiniteSteps:
    """`step(engine, losses, step)` instead of `engine.backward(loss); engine.step()`. Every rank takes the
    same decision (the check is averaged over ranks), so collectives stay in step."""

    def __init__(self, skips_allowed: int, stage: str):
        self.skips_allowed, self.stage, self.skipped = skips_allowed, stage, 0
        # The last step's gradient norm before clipping, for its step record (NaN where its loss was not finite).
        self.grad_norm = math.nan

    def step(self, engine, losses: torch.Tensor | Iterable[torch.Tensor], step: int) -> float:
        """A backward per micro-batch loss (each its share of the step's loss: the shares sum to it; a
        generator computes each only as it is reached, so one micro-batch's activations are in memory at a
        time), then one optimizer step. Returns the step's loss; a non-finite one skips the update."""
        total, problem = 0.0, None
        self.grad_norm = math.nan
        for loss in [losses] if isinstance(losses, torch.Tensor) else losses:
            value = loss.detach().float()
            total += value.item()
            if problem is None and self._all_finite(torch.isfinite(value).all().item()):
                engine.backward(loss, scale_wrt_gas=False)
            elif problem is None:
                problem = f"loss {value.item()}"
        if problem is not None:
            self._skip(engine, step, problem)
            return total
        norm = self.grad_norm = local_grad_norm(engine.module)
        if not self._all_finite(math.isfinite(norm)):
            self._skip(engine, step, f"gradient norm {norm}")
            return total
        engine.step()
        reported = engine.get_global_grad_norm()  # where DeepSpeed computes it (ZeRO stages that shard grads)
        if reported is not None and not math.isfinite(float(reported)):
            raise NonFiniteError(f"{self.stage} step {step}: gradient norm {reported} after the update; stopping")
        if reported is not None:  # the whole gradient's norm where this rank holds only its shard
            self.grad_norm = float(reported)
        return total

    def _all_finite(self, finite: bool) -> bool:
        return all_mean(1.0 if finite else 0.0) == 1.0

    def _skip(self, engine, step: int, what: str) -> bool:
        self.skipped += 1
        if self.skipped > self.skips_allowed:
            raise NonFiniteError(f"{self.stage} step {step}: non-finite {what} ({self.skipped} such step(s); "
                                 f"optimizer.nonfinite_skips allows {self.skips_allowed}); stopping without a commit")
        engine.zero_grad()
        return False


def local_grad_norm(module: torch.nn.Module) -> float:
    """The norm of the gradients held on this rank's parameters (0 where DeepSpeed moved them elsewhere)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def check_finite_parameters(model: torch.nn.Module, what: str) -> None:
    """Raise naming the first parameter of `model` that holds a NaN or infinity."""
    for name, parameter in model.named_parameters():
        if not torch.isfinite(parameter.detach()).all():
            raise NonFiniteError(f"{what}: parameter {name} is not finite; refusing to commit it")
