"""A trained model written as the Hugging Face directory plain transformers (and every engine) loads, however
it was trained: ZeRO-3's parameter shards gathered from every rank, LoRA adapters merged into their layers.
Checkpoints and RL weight pushes both write through here."""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path

import torch


def save_hf(model: torch.nn.Module, directory: str | Path, is_main: bool) -> None:
    """Rank 0 writes `model` (a causal LM or the ORM's scalar model) to `directory`. Every rank calls it:
    under ZeRO-3 the ranks gather the parameters together."""
    with gathered(model):
        if is_main:
            merged = merged_lora_state_dict(model)
            if merged is None:
                model.save_pretrained(directory)
            else:
                model.save_pretrained(directory, state_dict=merged)


def gathered(model: torch.nn.Module):
    """Every parameter whole on every rank while the context is open (ZeRO-3 partitions them; other
    stages keep them whole and need nothing)."""
    parameters = list(model.parameters())
    if not any(hasattr(parameter, "ds_id") for parameter in parameters):
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(parameters, modifier_rank=None)


def merged_lora_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """`model`'s state dict with each LoRA layer's update (alpha/r)·B·A folded into the weight it adapts,
    under that weight's own name; None for a model without adapters. Linear layers and the routed experts'
    fused parameters (which peft adapts in place) alike. The trained model is left as it is (merging in
    place and back would drift the base weights a rounding at a time)."""
    from peft.tuners.lora import LoraLayer

    adapted = {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}
    if not adapted:
        return None
    state = {BASE_LAYER.sub("", key): tensor for key, tensor in model.state_dict().items() if ".lora_" not in key}
    with torch.no_grad():
        for name, layer in adapted.items():
            parameter = getattr(layer, "parameter_name", None) or "weight"
            base = getattr(layer.get_base_layer(), parameter)
            delta = sum(layer.get_delta_weight(adapter) for adapter in layer.active_adapters)
            state[f"{BASE_LAYER.sub('', name)}.{parameter}"] = (base.float() + delta.float()).to(base.dtype)
    return state


# peft keeps an adapted module's own weights under `base_layer` (nested, where one module has two adapted
# parameters); a plain model has them where the module is.
BASE_LAYER = re.compile(r"\.base_layer(?=\.|$)")
