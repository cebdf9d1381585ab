"""How the engine draws a token from a row's logits: SGLang's truncations (top-k, then top-p, then min-p) and the
logprob it reports with the token (softmax(logits / temperature), before truncation; plain softmax when greedy)."""

from __future__ import annotations

import torch

from rollout.protocol import GREEDY_BELOW, SamplingParams


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row and its logprob under softmax(logits / temperature), drawn after SGLang's
    truncations: top-k, then top-p, then min-p."""
    if params.temperature < GREEDY_BELOW:
        logprobs = torch.log_softmax(logits, dim=-1)
        tokens = logprobs.argmax(dim=-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    probs, logprobs = sampling_distribution(logits, params)
    tokens = draw(probs, generator)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def sampling_distribution(logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(the probabilities [B, V] a token is drawn with, the logprobs [B, V] it is reported with). Greedy: all of
    the probability on the argmax."""
    if params.temperature < GREEDY_BELOW:
        logprobs = torch.log_softmax(logits, dim=-1)
        return torch.zeros_like(logprobs).scatter_(-1, logprobs.argmax(dim=-1, keepdim=True), 1.0), logprobs
    logprobs = torch.log_softmax(logits / params.temperature, dim=-1)
    probs = logprobs.exp()
    if not params.keeps_all_tokens() and params.top_k < probs.shape[-1]:
        kth = probs.topk(params.top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)  # top-p reads the mass of what top-k kept
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is short of it.
        keep_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
    if params.min_p > 0:
        probs = probs.masked_fill(probs < params.min_p * probs.max(dim=-1, keepdim=True).values, 0.0)
    return probs, logprobs


def draw(weights: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row, with probability proportional to the row's non-negative weights.

    Inverse-CDF sampling: one uniform number per row. torch.multinomial draws an exponential number
    per vocabulary entry instead, which took a quarter of the engine's decode time on CPU.
    """
    cdf = weights.double().cumsum(dim=-1)
    # Drawn on the CPU generator whatever the device: the same seed gives the same tokens anywhere.
    targets = torch.rand((weights.shape[0], 1), generator=generator, dtype=torch.float64).to(cdf.device) * cdf[:, -1:]
    # right=True picks the first entry whose cumulative weight exceeds the target: never a zero weight.
    return torch.searchsorted(cdf, targets, right=True).squeeze(-1).clamp(max=weights.shape[-1] - 1)
