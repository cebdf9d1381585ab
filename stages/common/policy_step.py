"""One optimizer step of a policy-gradient stage (GRPO, agentic RL, distillation) over a batch of sampled
sequences, in micro-batches: forward, fp32 logprobs, the stage's loss, backward, one update.

The stage gives the loss of a micro-batch (`loss_of(rows, batch, logp_new)`: the rows it holds, the
micro-batch on the device, its logprobs with gradient). A loss averaged over sequences weighs by its
share of the sequences, one averaged over tokens by its share of the tokens, so the micro-batches' losses
sum to the loss of the whole batch (stages/common/micro_batches.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Literal

import torch

from model.logprobs import scored_logprobs
from model.routing import ReplayedRouting
from model.shared_prompts import shared_prompt_logprobs
from stages.common.finite import FiniteSteps
from stages.common.micro_batches import merged_stats, micro_slices
from stages.common.mtp_training import MtpTraining, rl_loss_mask
from stages.common.rl_batches import TrainBatch

LossOf = Callable[[slice, TrainBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class PolicyStep:
    loss: float
    stats: dict[str, float]
    logp_old: torch.Tensor  # [N, L-1] on the CPU: the trainer's logprobs of the batch before the update


def policy_step(engine, batch: TrainBatch, micro: int | None, temperature: float, finite: FiniteSteps, step: int,
                loss_of: LossOf, mean_over: Literal["sequences", "tokens"], routing: ReplayedRouting | None = None,
                replay: bool = False, share_prompts: bool = False, mtp: MtpTraining | None = None) -> PolicyStep:
    """Train once on `batch` (CPU tensors), `micro` sequences at a time (None: all at once). With `routing` and
    the batch's routed experts, the step reports its routing agreement with the engine, and with `replay`
    its forwards (and backwards) use the engine's experts (model/routing.py). With `share_prompts`, rows of a
    micro-batch that start with the same prompt compute it once (model/shared_prompts.py). With `mtp`, the MTP
    layer trains on the responses beside the policy, stepped after it (stages/common/mtp_training.py)."""
    rows, tokens = batch.input_ids.shape[0], batch.response_tokens
    logp_old = torch.zeros_like(batch.logp_infer)
    parts: list[tuple[dict[str, float], float]] = []

    def micro_losses():
        for part in micro_slices(rows, micro or rows):
            micro_batch = batch.rows(part).to(engine.device)
            # Before the routing replay opens: its forward is not the policy's, so it neither replays nor counts.
            mtp_loss = None if mtp is None else mtp.loss(engine.module, micro_batch.input_ids, micro_batch.attention_mask,
                                                         rl_loss_mask(micro_batch.response_mask))
            # Open through the yield: the backward of this micro-batch runs before the generator resumes.
            with routing.replaying(micro_batch.routed_experts, replay) if routing is not None else nullcontext():
                logp_new = micro_logprobs(engine, micro_batch, temperature, share_prompts, routing)
                logp_old[part, :logp_new.shape[1]] = logp_new.detach().cpu()
                loss, stats = loss_of(part, micro_batch, logp_new)
                if mtp_loss is not None:
                    stats = stats | {"mtp_loss": mtp_loss.item()}
                    mtp.accumulate(mtp_loss * share_of(part, micro_batch))
                parts.append((stats, float(micro_batch.response_tokens)))
                yield loss * share_of(part, micro_batch)

    def share_of(part: slice, micro_batch: TrainBatch) -> float:
        return (part.stop - part.start) / rows if mean_over == "sequences" else micro_batch.response_tokens / tokens

    loss = finite.step(engine, micro_losses(), step)
    if mtp is not None:
        mtp.step(engine.get_lr()[0])
    agreement = routing.agreement() if routing is not None else None
    routed = {} if agreement is None else {"routing_agreement": agreement}
    return PolicyStep(loss, merged_stats(parts) | {"grad_norm": finite.grad_norm} | routed, logp_old)


def micro_logprobs(engine, micro: TrainBatch, temperature: float, share_prompts: bool,
                   routing: ReplayedRouting | None) -> torch.Tensor:
    """The micro-batch's response logprobs with gradient: with `share_prompts` each distinct prompt once, the
    routing replay handed each forward's own positions of the engine's experts; else one forward of every row."""
    if not share_prompts or micro.prompt_lengths is None:
        return scored_logprobs(engine, micro.input_ids, micro.attention_mask, micro.response_mask, temperature)
    experts = micro.routed_experts

    def before_pass(layout) -> None:
        if routing is not None and experts is not None:
            routing.given(layout(experts, -1))

    return shared_prompt_logprobs(engine, micro.input_ids, micro.attention_mask, micro.response_mask,
                                  micro.prompt_lengths, temperature, before_pass, experts)
