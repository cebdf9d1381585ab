"""Auxiliary-loss-free load balancing of MoE routers, as DeepSeek-V3 (§2.1.2) and GLM-5 train them.

A router picks each token's experts by their sigmoid scores plus a per-expert bias (transformers keeps it as
the buffer `e_score_correction_bias`, which takes no gradient); the weights that mix the chosen experts'
outputs are the scores without the bias, so the bias steers the choice and never enters the loss. After each
optimizer step every expert's bias moves by γ toward balance: up for an expert that got fewer tokens than the
layer's mean in that step, down for one that got more (b_i ← b_i + γ·sign(mean load − load_i)).

`RouterLoad` counts the tokens each layer sends to each expert while the model trains and makes the update;
`load_figures` is what a step record shows of the counts. The bias is a persistent buffer: it is in every
state dict, so checkpoints, resume state and weight pushes carry it and plain transformers loads it.
"""

from __future__ import annotations

import torch

from model.mtp import MtpLayer
from model.padding_free import token_positions

BIAS = "e_score_correction_bias"


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The MoE routers of `model`'s own layers, in layer order: the modules that hold a router bias. The MTP layer's
    (model/mtp.py) is left out: it routes outside the model's forward, and SGLang's routed experts list the model's
    layers alone."""
    carried = {id(module) for layer in model.modules() if isinstance(layer, MtpLayer) for module in layer.modules()}
    return [module for module in model.modules() if hasattr(module, BIAS) and id(module) not in carried]


def hook_routers(model: torch.nn.Module, hook) -> list[torch.nn.Module]:
    """`hook(index, router, positions, output)` after every forward of each router of `model` (a value it returns
    replaces the router's output: (logits, weights, experts)); the routers, in layer order. `positions`: where the
    router saw the batch's tokens without their padding (model/padding_free.py), the flat indices into the
    forward's [batch × positions] of its rows; None where it saw the padded layout."""
    found = routers(model)
    for index, router in enumerate(found):
        router.register_forward_hook(lambda module, inputs, output, index=index: hook(
            index, module, token_positions(model, inputs[0]), output))
    return found


class RouterLoad:
    """Per-expert token counts of every MoE layer of `model` (a transformers causal LM) over its training
    forwards since the last `take()`. Hooks on the model's trunk read which positions are tokens (padding is
    not routed work anyone asked for) and mark a forward in progress; hooks on the routers count their choices.
    A forward without gradients (held-out loss, reference logprobs) is not counted, nor a layer recomputed in
    backward (activation checkpointing): it runs outside the trunk's forward. RL trains in eval mode (no
    dropout), so the mode does not tell."""

    def __init__(self, model: torch.nn.Module):
        self.routers = hook_routers(model, self._count)
        experts = getattr(self.routers[0], BIAS).numel() if self.routers else 0
        self.counts = torch.zeros(len(self.routers), experts, dtype=torch.float64)
        self._tokens: torch.Tensor | None = None  # [rows, keys] bool while a counted forward runs
        self._counting = False
        self._masters: list[torch.Tensor] | None = None  # fp32 copies of the biases (see balance)
        if self.routers:
            trunk = model.get_decoder()
            trunk.register_forward_pre_hook(self._enter, with_kwargs=True)
            trunk.register_forward_hook(self._leave)

    def _enter(self, trunk, args, kwargs) -> None:
        self._counting = torch.is_grad_enabled()
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        self._tokens = mask.bool() if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None

    def _leave(self, trunk, args, output) -> None:
        self._counting, self._tokens = False, None

    def _count(self, index: int, router, positions: torch.Tensor | None, output) -> None:
        if not self._counting:
            return
        chosen = output[2]  # [positions, top_k]: the experts each position was sent to
        # Rows of tokens alone (padding-free) are counted as they are.
        rows, keys = self._tokens.shape if self._tokens is not None and positions is None else (0, 0)
        if rows and chosen.shape[0] % rows == 0 and chosen.shape[0] // rows <= keys:
            # A forward after a KV cache (model/shared_prompts.py) has a mask over the cached keys too: its own
            # positions are the mask's last columns.
            tokens = self._tokens[:, keys - chosen.shape[0] // rows:]
            chosen = chosen[tokens.reshape(-1).to(chosen.device)]
        self.counts[index] += torch.bincount(chosen.reshape(-1).cpu(), minlength=self.counts.shape[1]).double()

    def take(self) -> torch.Tensor:
        """[layers, experts]: the tokens counted since the last take (this process's), and start again."""
        counts, self.counts = self.counts, torch.zeros_like(self.counts)
        return counts

    @torch.no_grad()
    def balance(self, counts: torch.Tensor, rate: float) -> None:
        """Each router's bias a step of `rate` toward its layer's mean load in `counts` ([layers, experts], summed
        over every rank, so each rank takes the same step). A layer that routed no token is left as it is. The
        steps add up in fp32 copies taken at the first update (after a resume has loaded the biases): a bias held
        in bf16 would round a step of 0.001 away once it passes 0.25."""
        if self._masters is None:
            self._masters = [getattr(router, BIAS).detach().float().clone() for router in self.routers]
        for router, master, layer in zip(self.routers, self._masters, counts, strict=True):
            if layer.sum() > 0:
                master.add_(rate * torch.sign(layer.mean() - layer).to(master.device, master.dtype))
                getattr(router, BIAS).copy_(master)


def load_figures(counts: torch.Tensor) -> dict[str, list[float] | float]:
    """A step record's view of `counts` ([layers, experts]): per MoE layer the busiest and the least-loaded
    expert's load as multiples of the layer's mean (1 and 1 when balanced) and the experts that got no token;
    and the worst layer's busiest load, the figure a curve follows."""
    routed = counts[counts.sum(dim=1) > 0]
    if not len(routed):
        return {}
    mean = routed.mean(dim=1, keepdim=True)
    busiest, least = (routed / mean).max(dim=1).values, (routed / mean).min(dim=1).values
    return {"expert_load_max_over_mean": round(float(busiest.max()), 4),
            "expert_load": {"max_over_mean": [round(float(v), 4) for v in busiest],
                            "min_over_mean": [round(float(v), 4) for v in least],
                            "idle_experts": [int(v) for v in (routed == 0).sum(dim=1)]}}
