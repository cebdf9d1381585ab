"""Per-token log-probabilities of a sequence under a model's logits: the engine's and the trainer's."""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[target] along the last dimension: logits [..., V], targets [...].

    The engine scores prompts and the trainer scores responses with this one function, so both compute a
    token's probability the same way.
    """
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logprobs.gather(-1, targets[..., None]).squeeze(-1)


def next_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The logprob of every next token, input_ids[:, t+1] under logits[:, t]: [N, L-1]."""
    return token_logprobs(logits[:, :-1], input_ids[:, 1:], temperature)


def scored_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, scored: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """`next_token_logprobs` where `scored` [N, L-1] is set (0 elsewhere), with the vocabulary projection run on
    those positions alone: on RL batches most positions are prompt or padding, and projecting them onto the
    vocabulary (forward, softmax, backward) only to mask them out was the largest part of a small model's step.
    `model` is a transformers causal LM (or an engine or adapter forwarding to one): it takes the positions to
    keep as a boolean `logits_to_keep` and returns their logits flattened, in row-major order."""
    keep = torch.cat([scored.bool(), scored.new_zeros(scored.shape[0], 1, dtype=torch.bool)], dim=1)  # [N, L]
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits  # [M, V]
    rows, positions = scored.bool().nonzero(as_tuple=True)
    kept = token_logprobs(logits, input_ids[rows, positions + 1], temperature)
    return kept.new_zeros(scored.shape).index_put((rows, positions), kept)
