"""One optimizer step of a policy-gradient stage (GRPO, agentic RL, distillation) over a batch of sampled
sequences, in micro-batches: forward, fp32 logprobs, the stage's loss, backward, one update.

The stage gives the loss of a micro-batch (`loss_of(rows, batch, logp_new)`: the batch's indices of the rows it
holds, the micro-batch on the device, its logprobs with gradient). A loss averaged over sequences weighs by its
share of the sequences, one averaged over tokens by its share of the tokens, so the micro-batches' losses
sum to the loss of the whole batch (stages/common/micro_batches.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from model.logprobs import scored_logprobs
from stages.common.finite import FiniteSteps
from stages.common.micro_batches import merged_stats, micro_slices
from stages.common.rl_batches import TrainBatch

LossOf = Callable[[torch.Tensor, TrainBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]
# Without a micro-batch size, a step's rows go in this many forwards of rows of like length: a forward pads every
# row to the longest of it, and RL's completions vary in length. 32 GRPO rows of 20-94 tokens on glm5-tiny,
# forward + backward on a 2-core CPU: 0.20 s at once, 0.16 s in two forwards, 0.17 s in four.
LENGTH_GROUPS = 2


@dataclass(frozen=True)
class PolicyStep:
    loss: float
    stats: dict[str, float]
    logp_old: torch.Tensor  # [N, L-1] on the CPU: the trainer's logprobs of the batch before the update


def policy_step(engine, batch: TrainBatch, micro: int | None, temperature: float, finite: FiniteSteps, step: int,
                loss_of: LossOf, mean_over: Literal["sequences", "tokens"]) -> PolicyStep:
    """Train once on `batch` (CPU tensors), `micro` sequences at a time (None: in LENGTH_GROUPS forwards), the
    rows in order of length so that each forward pads little. `loss_of` gets the batch's indices of the rows it
    is given."""
    rows, tokens = batch.input_ids.shape[0], batch.response_tokens
    by_length = torch.argsort(batch.attention_mask.sum(dim=1), stable=True)
    logp_old = torch.zeros_like(batch.logp_infer)
    parts: list[tuple[dict[str, float], float]] = []

    def micro_losses():
        for part in micro_slices(rows, micro or -(-rows // LENGTH_GROUPS)):
            indices = by_length[part]
            micro_batch = batch.rows(indices).to(engine.device)
            logp_new = scored_logprobs(engine, micro_batch.input_ids, micro_batch.attention_mask,
                                       micro_batch.response_mask, temperature)
            logp_old[indices, :logp_new.shape[1]] = logp_new.detach().cpu()
            loss, stats = loss_of(indices, micro_batch, logp_new)
            parts.append((stats, float(micro_batch.response_tokens)))
            share = len(indices) / rows if mean_over == "sequences" else micro_batch.response_tokens / tokens
            yield loss * share

    loss = finite.step(engine, micro_losses(), step)
    return PolicyStep(loss, merged_stats(parts) | {"grad_norm": finite.grad_norm}, logp_old)
