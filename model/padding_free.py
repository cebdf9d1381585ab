"""Padding-free feed-forward: each decoder layer's MLP or MoE computes the batch's tokens only, not its padding.

A padded batch of sequences of different lengths spends the padding's share of every per-token computation on
positions nothing reads: a quarter of the demo's SFT batches (length-grouped, 23,047 tokens padded to 31,680
over 12 steps), more of an RL batch of prompts and responses. Attention needs the padded [batch, positions]
layout (one SDPA per batch, the keys of one sequence in one row); a feed-forward does not: it treats every
position alone. `PaddingFreeFeedForward` hands each layer's `mlp` the [tokens, hidden] rows of the real tokens
and puts its output back in the padded layout, zeros at the padding (which the residual stream carries on, and
which every later layer masks out as a key and nobody reads as a query). The real tokens' outputs are the padded
computation's up to float rounding; the experts' routers see the tokens alone, so the experts neither compute
for padding nor count it as load (`token_positions` tells a router's hook which positions its rows are).

This is what padding-free training does on a GPU (TRL's `padding_free`, flash attention's variable-length
kernels) for the feed-forward, the largest per-token cost of an MoE layer, with no variable-length attention
kernel needed.
"""

from __future__ import annotations

import torch

from model.mtp import main_layers


def padding_free_feed_forward(model: torch.nn.Module) -> PaddingFreeFeedForward:
    """Make the feed-forward of `model` (a transformers causal LM, or a module holding one: the reward model)
    padding-free; installing twice changes nothing."""
    trunk = _trunk(model)
    if not isinstance(getattr(trunk, "padding_free", None), PaddingFreeFeedForward):
        trunk.padding_free = PaddingFreeFeedForward(trunk)
    return trunk.padding_free


def token_positions(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor | None:
    """For a module inside `model`'s feed-forward that got `hidden`: the flat indices into the forward's [batch ×
    positions] of its rows where it got the tokens alone ([tokens, hidden]), None where it got the padded layout."""
    packing = getattr(_trunk(model), "padding_free", None)
    return packing.positions if isinstance(packing, PaddingFreeFeedForward) and hidden.dim() == 2 else None


def _trunk(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of the first transformers model in `model`."""
    return next(module for module in model.modules() if hasattr(module, "get_decoder")).get_decoder()


class PaddingFreeFeedForward:
    """Hooks on a transformers decoder stack (`trunk`): its forward reads which positions are tokens from its
    [batch, keys] attention mask, each decoder layer's `mlp` computes those positions only. A forward after a
    KV cache (model/shared_prompts.py) has the cached keys' columns too: its own positions are the last ones.

    The mask stays until the next trunk forward, so a layer recomputed in backward (activation checkpointing)
    packs as its forward did. A forward without such a mask (none, or a 4-D one) or without padding computes
    padded, as without the hooks."""

    def __init__(self, trunk: torch.nn.Module):
        self._mask: torch.Tensor | None = None  # the trunk forward's [batch, keys] attention mask
        self._positions_of: dict[int, torch.Tensor | None] = {}  # per forward length: the same for every layer
        self._packed: torch.Size | None = None  # the running mlp call's padded [batch, positions, hidden]
        self.positions: torch.Tensor | None = None  # that call's tokens: flat indices into [batch × positions]
        trunk.register_forward_pre_hook(self._read_mask, with_kwargs=True)
        for layer in main_layers(trunk):
            layer.mlp.register_forward_pre_hook(self._pack)
            layer.mlp.register_forward_hook(self._unpack_output)

    def _read_mask(self, trunk, args, kwargs) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        self._mask = mask.bool() if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        self._positions_of = {}

    def _pack(self, mlp, args):
        hidden = args[0]
        self._packed = self.positions = None
        if self._mask is None or hidden.dim() != 3 or hidden.shape[0] != self._mask.shape[0] \
                or hidden.shape[1] > self._mask.shape[1]:
            return None
        length = hidden.shape[1]
        if length not in self._positions_of:
            own = self._mask[:, -length:]
            self._positions_of[length] = None if bool(own.all()) else own.reshape(-1).nonzero().squeeze(-1)
        positions = self._positions_of[length]
        if positions is None:
            return None
        self._packed, self.positions = hidden.shape, positions.to(hidden.device)
        return (hidden.reshape(-1, hidden.shape[-1]).index_select(0, self.positions), *args[1:])

    def _unpack_output(self, mlp, args, output):
        if self._packed is None:
            return None
        batch, positions, width = self._packed
        rows = output.new_zeros(batch * positions, width)
        return rows.index_copy(0, self.positions, output).view(batch, positions, width)
