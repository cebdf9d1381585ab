"""Logprobs of sampled responses with each distinct prompt run once: GRPO samples a group of responses per prompt,
and a trainer that re-forwards every prompt + response row computes the prompt's layers once per member.

The prompts go through the model first, left-padded so they all end in the same column, into a KV cache (with
gradient); each row then takes its prompt's cached keys and values and runs its response after them, as an engine
decodes after a prefill, but all of a response's tokens in one causal forward. Gradients from every member reach
the shared prompt positions through the cache, summed, which is what the per-row forward sums too: the same loss
and gradient, up to float rounding, for a forward over (distinct prompts + responses) tokens instead of (members ×
(prompt + response)). On the demo's reasoning RL steps (8 members per prompt, prompts about as long as responses)
that is a third fewer tokens through every layer. verl's "prefix grouper" does this for GRPO on GPUs.

A prompt's first response token is predicted by the prompt's last position: its logits come from the prompt pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.logprobs import token_logprobs

# Maps a per-row, per-position tensor of the batch ([N, L, ...], right-padded) to one pass's layout.
Layout = Callable[[torch.Tensor, int], torch.Tensor]


@dataclass(frozen=True)
class PromptSharing:
    """Which rows share a prompt, and how a batch's [N, L, ...] tensors lay out in the two passes."""

    owner: torch.Tensor  # [N]: each row's distinct prompt
    first_row: torch.Tensor  # [U]: a row holding each distinct prompt
    prompt_lengths: torch.Tensor  # [N]
    prompt_width: int  # P: the longest prompt
    response_width: int  # R: the longest response (padding included up to the batch's longest sequence)

    @classmethod
    def of(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_lengths: torch.Tensor,
           routed_experts: torch.Tensor | None = None) -> PromptSharing:
        """Rows whose prompts are the same token ids share them; `prompt_lengths` [N] are each row's prompt tokens.
        With `routed_experts` ([N, L, ...], the engine's), only where the engine also routed the prompts alike: an
        engine whose kernels depend on the batch may have routed one member's prompt otherwise, and a replay must
        give every row its own."""
        lengths = prompt_lengths.tolist()
        distinct: dict[tuple, int] = {}
        owner, first_row = [], []
        for row, (ids, length) in enumerate(zip(input_ids.tolist(), lengths, strict=True)):
            routing = b"" if routed_experts is None else routed_experts[row, :length].cpu().numpy().tobytes()
            prompt = (tuple(ids[:length]), routing)
            if prompt not in distinct:
                distinct[prompt] = len(first_row)
                first_row.append(row)
            owner.append(distinct[prompt])
        responses = attention_mask.sum(dim=1).cpu() - prompt_lengths.cpu()
        return cls(torch.tensor(owner, device=input_ids.device), torch.tensor(first_row, device=input_ids.device),
                   prompt_lengths.to(input_ids.device), max(lengths), max(1, int(responses.max())))

    def prompts(self, values: torch.Tensor, fill: int) -> torch.Tensor:
        """[U, P, ...]: each distinct prompt's positions of `values`, left-padded with `fill`."""
        lengths = self.prompt_lengths[self.first_row]
        columns = torch.arange(self.prompt_width, device=values.device)
        start = self.prompt_width - lengths  # [U]
        source = (columns[None, :] - start[:, None]).clamp(min=0)  # [U, P]: the prompt position at each column
        return self._taken(values[self.first_row], source, columns[None, :] >= start[:, None], fill)

    def responses(self, values: torch.Tensor, fill: int) -> torch.Tensor:
        """[N, R, ...]: each row's positions from its response's first token on, right-padded with `fill`."""
        columns = torch.arange(self.response_width, device=values.device)
        source = self.prompt_lengths[:, None] + columns[None, :]  # [N, R]
        inside = source < values.shape[1]
        return self._taken(values, source.clamp(max=values.shape[1] - 1), inside, fill)

    @staticmethod
    def _taken(values: torch.Tensor, source: torch.Tensor, inside: torch.Tensor, fill: int) -> torch.Tensor:
        extra = values.shape[2:]
        index = source.view(*source.shape, *([1] * len(extra))).expand(*source.shape, *extra)
        taken = values.gather(1, index)
        keep = inside.view(*inside.shape, *([1] * len(extra)))
        return torch.where(keep, taken, torch.full_like(taken, fill))


def shared_prompt_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, scored: torch.Tensor,
                           prompt_lengths: torch.Tensor, temperature: float = 1.0,
                           before_pass: Callable[[Layout], None] | None = None,
                           routed_experts: torch.Tensor | None = None) -> torch.Tensor:
    """`model.logprobs.scored_logprobs` of right-padded prompt + response rows ([N, L] ids and mask, `scored`
    [N, L-1] the targets to score, none of them inside a prompt), each distinct prompt computed once (module
    docstring). `model` is a transformers causal LM over a DSA/MLA or any KV-cached attention, or an engine
    forwarding to one. `before_pass(layout)` runs before each of the two forwards with the layout that maps the
    batch's [N, L, ...] tensors to that forward's positions (the routing replay reads its experts through it);
    with the engine's `routed_experts`, rows share a prompt only where it routed the prompt alike."""
    positions = torch.arange(scored.shape[1], device=scored.device)
    if (scored.bool() & (positions[None, :] < prompt_lengths[:, None].to(scored.device) - 1)).any():
        raise ValueError("shared prompts: a scored target lies inside its prompt")
    sharing = PromptSharing.of(input_ids, attention_mask, prompt_lengths, routed_experts)
    if before_pass is not None:
        before_pass(sharing.prompts)
    prompt_mask = sharing.prompts(attention_mask, 0)
    # Padding is masked out: any id in the vocabulary does for it.
    prefill = model(input_ids=sharing.prompts(input_ids, 0), attention_mask=prompt_mask,
                    position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0), use_cache=True, logits_to_keep=1)
    cache = prefill.cache
    cache.batch_select_indices(sharing.owner)  # each row its prompt's keys and values (a gather: gradients sum)

    # Target t scores token t + 1: the response pass's column j (token p + j) scores target p + j.
    scored_rows = torch.cat([scored, scored.new_zeros(scored.shape[0], 1)], dim=1)
    response_scored = sharing.responses(scored_rows, 0).bool()
    if before_pass is not None:
        before_pass(sharing.responses)
    response_mask = sharing.responses(attention_mask, 0)
    response_positions = sharing.prompt_lengths[:, None] + torch.arange(sharing.response_width, device=input_ids.device)
    logits = model(input_ids=sharing.responses(input_ids, 0),
                   attention_mask=torch.cat([prompt_mask[sharing.owner], response_mask], dim=1),
                   position_ids=response_positions, cache=cache, use_cache=True,
                   logits_to_keep=response_scored).logits  # [M, V]

    rows, columns = response_scored.nonzero(as_tuple=True)
    targets = sharing.prompt_lengths[rows] + columns
    logprobs = scored.new_zeros(scored.shape, dtype=torch.float32)
    logprobs = logprobs.index_put((rows, targets), token_logprobs(logits, input_ids[rows, targets + 1], temperature))
    # The first response token: scored by the prompt's last position, in the prompt pass.
    first = (sharing.prompt_lengths - 1).clamp(min=0)
    row_index = torch.arange(scored.shape[0], device=scored.device)
    starts = scored.bool()[row_index, first].nonzero(as_tuple=True)[0]
    if len(starts):
        first_logits = prefill.logits[:, -1][sharing.owner[starts]]
        logprobs = logprobs.index_put((starts, first[starts]), token_logprobs(
            first_logits, input_ids[starts, first[starts] + 1], temperature))
    return logprobs
