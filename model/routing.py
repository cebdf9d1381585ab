"""Routing replay ("R3"): the experts the engine chose for each token, replayed in the trainer's forward.

An RL trainer recomputes each token's experts; where its numerics differ from the engine's (bf16, other
kernels) a token can go to other experts than the ones its sample was drawn with, one of the main sources of
train-inference mismatch in MoE RL. The engine returns its choices as SGLang does (`meta_info.routed_experts`
with `return_routed_experts`: int32, [tokens, num_hidden_layers, top_k] row-major, base64; the tokens are
every position the model ran, prompt and completion, all but the last sampled token; a layer without a router
holds zeros). `RoutingCapture` is the engine's side, `ReplayedRouting` the trainer's: with replay on, a
router's choice at a position the engine routed is the engine's, mixed by the router's own scores for those
experts (normalised and scaled as the router does), so gradients reach the router as they would; either way
it counts how often the trainer's own choice matched (routing agreement).
"""

from __future__ import annotations

import base64
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from model.moe_balance import hook_routers, routers
from model.mtp import main_layers


def moe_layers(model: torch.nn.Module) -> list[int]:
    """The positions in the model's stack of the layers that route, in the order `routers(model)` lists them."""
    layers = main_layers(model.get_decoder())
    return [index for index, layer in enumerate(layers) if routers(layer)]


def encode_routed(routed: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(routed, dtype=np.int32).tobytes()).decode("ascii")


def decode_routed(payload: str, num_layers: int, top_k: int) -> np.ndarray:
    """SGLang's `meta_info.routed_experts` as [tokens, num_layers, top_k] int32."""
    return np.frombuffer(base64.b64decode(payload), dtype=np.int32).reshape(-1, num_layers, top_k)


@dataclass(frozen=True)
class RoutingLayout:
    """How a model's routed experts are laid out in SGLang's payload, and which of its layers route."""

    num_layers: int
    top_k: int
    moe_layers: tuple[int, ...]

    @classmethod
    def of(cls, model: torch.nn.Module) -> RoutingLayout | None:
        """None for a model without MoE layers."""
        layers = moe_layers(model)
        return cls(len(main_layers(model.get_decoder())), model.config.num_experts_per_tok, tuple(layers)) if layers else None

    def routed_layers(self, payload: str) -> torch.Tensor:
        """[positions, MoE layers, top_k]: the payload's routing layers only."""
        return torch.from_numpy(decode_routed(payload, self.num_layers, self.top_k)[:, list(self.moe_layers)].copy())


class RoutingCapture:
    """The experts every router of `model` chose in its last forward while `recording`: `last()` gives, per
    MoE layer, [positions, top_k] in the forward's row-major order of positions."""

    def __init__(self, model: torch.nn.Module):
        self.recording = False
        self._last: list[torch.Tensor | None] = [None] * len(hook_routers(model, self._keep))

    def _keep(self, index: int, router, positions: torch.Tensor | None, output) -> None:
        if self.recording:
            self._last[index] = output[2].to(torch.int32).cpu()

    def last(self) -> list[torch.Tensor]:
        return list(self._last)  # type: ignore[arg-type]


class ReplayedRouting:
    """While `replaying(engine_experts, replay)` is open, the routers of `model` see the engine's experts for the
    forward's positions (`engine_experts` [rows, positions, moe layers, top_k], -1 where the engine routed
    none: padding, a sequence's last token). With `replay` the routers use them; either way the positions the
    engine routed count toward `agreement()`, the share of (position, layer) pairs where the router's own
    choice is the engine's set of experts. Keep it open through the backward: a layer recomputed there
    (activation checkpointing) replays the same experts; only the forward's own routing is counted."""

    def __init__(self, model: torch.nn.Module):
        self._experts: torch.Tensor | None = None
        self._replay = False
        self._in_forward = False
        self.matched = self.routed = 0
        trunk = model.get_decoder()
        trunk.register_forward_pre_hook(lambda module, args: self._forward(True))
        trunk.register_forward_hook(lambda module, args, output: self._forward(False))
        hook_routers(model, self._route)

    def _forward(self, running: bool) -> None:
        self._in_forward = running

    @contextmanager
    def replaying(self, engine_experts: torch.Tensor | None, replay: bool):
        self._experts, self._replay = engine_experts, replay
        try:
            yield
        finally:
            self._experts, self._replay = None, False

    def given(self, engine_experts: torch.Tensor | None) -> None:
        """Inside `replaying`: the engine's experts for the next forward's positions, where one batch runs as
        several forwards (model/shared_prompts.py: the prompts, then the responses)."""
        self._experts = engine_experts

    def agreement(self) -> float | None:
        """The share counted since the last call (None where nothing was), and start again."""
        share = self.matched / self.routed if self.routed else None
        self.matched = self.routed = 0
        return share

    def _route(self, index: int, router, positions: torch.Tensor | None, output):
        if self._experts is None:
            return None
        logits, weights, chosen = output
        given = self._experts[..., index, :].reshape(-1, chosen.shape[-1]).to(chosen.device)
        if positions is not None:  # the router saw the tokens alone (model/padding_free.py)
            given = given[positions.to(given.device)]
        if given.shape[0] != chosen.shape[0]:
            raise ValueError(f"routing replay: {given.shape[0]} positions given for a forward of {chosen.shape[0]}")
        known = (given >= 0).all(dim=-1)
        if self._in_forward:
            same = (given.sort(dim=-1).values == chosen.sort(dim=-1).values).all(dim=-1) & known
            self.matched += int(same.sum())
            self.routed += int(known.sum())
        if not self._replay:
            return None
        picked = torch.where(known[:, None], given.to(chosen.dtype), chosen)
        mixed = logits.sigmoid().gather(1, picked)
        if router.norm_topk_prob:
            mixed = mixed / (mixed.sum(dim=-1, keepdim=True) + 1e-20)
        return logits, (mixed * router.routed_scaling_factor).to(weights.dtype), picked
