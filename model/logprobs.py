"""Per-token log-probabilities of a sequence under a model's logits: the engine's and the trainer's."""

from __future__ import annotations

import torch


def next_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits[:, t] / temperature)[input_ids[:, t+1]] for every t: [N, L-1].

    The engine scores prompts and the trainer scores responses with this one function, so both
    compute a token's probability the same way.
    """
    logprobs = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
