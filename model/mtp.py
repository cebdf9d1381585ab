"""GLM-5's multi-token prediction (MTP) layer, carried beside transformers' `GlmMoeDsaForCausalLM`.

GLM-5 ships one MTP layer after its 78 decoder layers (`num_nextn_predict_layers: 1`, tensors `model.layers.78.*`),
built as DeepSeek-V3's: the next token's embedding and the model's hidden state, each RMS-normed, concatenated and
projected (`eh_proj`), then one full decoder layer (MLA attention, MoE) and a norm before the model's own LM head
(`shared_head.norm`; the head and the embedding are the model's, GLM-5 stores no copy). transformers does not model
it and drops its tensors on load; here it is a module at `model.layers[num_hidden_layers]`, so a state dict, a
DeepSpeed checkpoint, a weight push and `save_pretrained` all carry it under GLM-5's names, while the model's own
forward (which runs `layers[:num_hidden_layers]`) never sees it.

One layer serves every depth, as GLM-5 trains it (3 depths sharing one set of parameters): at depth k the input
at a position is the depth k−1 output there (the model's hidden state at depth 1) with the embedding of the token
k positions ahead, and the output predicts the token after that (`mtp_loss`). Drafting (rollout/engine/drafter.py)
chains it the same way, a token at a time.

What is trained: the layer alone. Its inputs (the model's hidden states, the embedding) and the LM head it reads are
used detached, so its loss moves none of the model's own weights: an RL stage's policy gradient stays the policy's
own, and SFT's model is what it would be without it (up to the shared gradient-norm clip).

Its attention attends densely over every earlier position: drafts need no exact rule (the model verifies them) and
its DSA indexer, kept and saved for SGLang and GLM-5's tooling, is not trained here.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaDecoderLayer, GlmMoeDsaRMSNorm

from model.dsa import mla_projections
from model.dsa_gather import masked_attention

# The config field GLM-5 (and DeepSeek-V3) name their MTP layers by.
MTP_LAYERS = "num_nextn_predict_layers"


class MtpConfigError(ValueError):
    pass


def mtp_layer_count(config) -> int:
    return int(getattr(config, MTP_LAYERS, 0) or 0)


class SharedHead(nn.Module):
    """The norm before the model's LM head (`shared_head.norm`); the head itself is the model's."""

    def __init__(self, config):
        super().__init__()
        self.norm = GlmMoeDsaRMSNorm(config.hidden_size, config.rms_norm_eps)


class MtpLayer(nn.Module):
    """GLM-5's MTP layer, its parameters under the names GLM-5's checkpoint gives them."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        block = GlmMoeDsaDecoderLayer(layer_config(config), layer_idx)
        self.layer_idx = layer_idx
        self.enorm = GlmMoeDsaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hnorm = GlmMoeDsaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.input_layernorm, self.self_attn = block.input_layernorm, block.self_attn
        self.post_attention_layernorm, self.mlp = block.post_attention_layernorm, block.mlp
        self.shared_head = SharedHead(config)

    def project(self, hidden: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """The layer's input: [enorm(embedding of the next token), hnorm(hidden state)] through eh_proj."""
        return self.eh_proj(torch.cat([self.enorm(embeds), self.hnorm(hidden)], dim=-1))

    def feed_forward(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x))


def layer_config(config):
    """The model's config extended by one layer at index num_hidden_layers: an MoE layer with its own indexer,
    as GLM-5's layer 78 is."""
    extended = copy.deepcopy(config)
    extended.mlp_layer_types = [*config.mlp_layer_types, "sparse"]
    extended.indexer_types = [*config.indexer_types, "full"]
    return extended


def mtp_layer(model: nn.Module) -> MtpLayer | None:
    """The MTP layer `model` (a causal LM, or a module holding one) carries, if any."""
    trunk = decoder_of(model)
    extra = trunk.layers[trunk.config.num_hidden_layers:]
    return extra[0] if len(extra) and isinstance(extra[0], MtpLayer) else None


def decoder_of(model: nn.Module) -> nn.Module:
    return next(module for module in model.modules() if hasattr(module, "get_decoder")).get_decoder()


def main_layers(trunk: nn.Module) -> nn.ModuleList:
    """The decoder stack's own layers, the MTP layer (if carried) left out."""
    return trunk.layers[: trunk.config.num_hidden_layers]


def attach_mtp(model: nn.Module) -> MtpLayer | None:
    """Give `model` (a GlmMoeDsa causal LM) the MTP layer its config declares, freshly initialised as transformers
    initialises the model's own layers; None where it declares none. GLM-5 has one; more are refused by name."""
    count = mtp_layer_count(model.config)
    if count == 0:
        return mtp_layer(model)
    if count > 1:
        raise MtpConfigError(f"config {MTP_LAYERS} is {count}: posttrain carries GLM-5's one MTP layer")
    if getattr(model.config, "model_type", None) != "glm_moe_dsa":  # GLM-4.5's glm4_moe declares one too
        warnings.warn(f"config {MTP_LAYERS} is {count}, but MTP is carried for glm_moe_dsa models only, not "
                      f"{model.config.model_type!r}: its MTP tensors are not loaded, and a checkpoint saved from it "
                      "has none", stacklevel=2)
        return None
    if (existing := mtp_layer(model)) is not None:
        return existing
    trunk = model.get_decoder()
    layer = MtpLayer(model.config, model.config.num_hidden_layers)
    layer.apply(model._init_weights)
    trunk.layers.append(layer.to(device=model.device, dtype=model.dtype))
    return layer


def mtp_state_keys(model: nn.Module) -> list[str]:
    """The state-dict names of the MTP layer's tensors (`model.layers.{N}.…`)."""
    prefix = f"model.layers.{model.config.num_hidden_layers}."
    return [name for name in model.state_dict() if name.startswith(prefix)]


def load_mtp_weights(model: nn.Module, directory: str | Path) -> None:
    """The MTP tensors of a checkpoint directory into `model`'s MTP layer (`attach_mtp` first): every one the layer
    has must be there, by name; the layer's copies of the embedding and the head, which some exports add, are the
    model's own and are not read."""
    from safetensors import safe_open

    directory = Path(directory)
    prefix = f"model.layers.{model.config.num_hidden_layers}."
    found: dict[str, torch.Tensor] = {}
    for shard in sorted(directory.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as handle:
            for key in handle.keys():
                if key.startswith(prefix):
                    found[key] = handle.get_tensor(key)
    wanted = mtp_state_keys(model)
    fuse_experts(found, wanted)
    missing = [key for key in wanted if key not in found]
    if missing:
        raise MtpConfigError(f"{directory}: config.json declares {MTP_LAYERS} but the weights lack {missing[0]} "
                             f"({len(missing)} of the MTP layer's {len(wanted)} tensors missing)")
    state = model.state_dict()
    with torch.no_grad():
        for key in wanted:
            state[key].copy_(found[key].to(state[key].dtype))


def fuse_experts(tensors: dict[str, torch.Tensor], wanted: list[str]) -> None:
    """transformers keeps a layer's routed experts fused (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj`
    [E, H, I]) and saves them one expert at a time (`mlp.experts.{e}.gate_proj.weight`, as GLM-5's checkpoint
    holds them): fuse what is saved that way into the names `wanted` lists."""
    for key in wanted:
        if key in tensors or not key.endswith(("experts.gate_up_proj", "experts.down_proj")):
            continue
        stem, fused = key.rsplit(".", 1)
        experts = sorted({int(name[len(stem) + 1:].split(".")[0]) for name in tensors
                          if name.startswith(stem + ".") and name[len(stem) + 1:].split(".")[0].isdigit()})
        if not experts:
            continue
        if fused == "gate_up_proj":
            tensors[key] = torch.stack([torch.cat([tensors[f"{stem}.{e}.gate_proj.weight"],
                                                   tensors[f"{stem}.{e}.up_proj.weight"]]) for e in experts])
        else:
            tensors[key] = torch.stack([tensors[f"{stem}.{e}.down_proj.weight"] for e in experts])


def whole_detached(parameter: torch.Tensor) -> torch.Tensor:
    """`parameter`'s value without gradient: a copy gathered from every rank where ZeRO-3 partitions it."""
    if not hasattr(parameter, "ds_id"):
        return parameter.detach()
    import deepspeed

    with deepspeed.zero.GatheredParameters([parameter]):
        return parameter.detach().clone()


def rotary(model: nn.Module, x: torch.Tensor, position_ids: torch.Tensor):
    return decoder_of(model).rotary_emb(x, position_ids)


def mtp_loss(model: nn.Module, hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             loss_mask: torch.Tensor, depths: int) -> torch.Tensor:
    """GLM-5's MTP loss: the mean over depths 1..`depths` of the masked token-mean NLL of the token k+1 ahead,
    predicted at every position from the depth k−1 output there and the embedding of the token k ahead.

    `hidden` [B, T, H] is the model's last hidden state (after its final norm, what its LM head reads);
    `attention_mask` [B, T] its padding (right-padded rows); `loss_mask` [B, T] the tokens trained (a token is
    predicted at every depth whose position it is trained at). Each depth attends causally over its own
    positions, at the rotary position of the token it embeds."""
    layer = mtp_layer(model)
    causal_lm = next(module for module in model.modules() if hasattr(module, "lm_head"))
    embedding = whole_detached(causal_lm.get_input_embeddings().weight)
    head = whole_detached(causal_lm.lm_head.weight)
    batch, length = input_ids.shape
    valid = attention_mask.bool()
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    previous = hidden.detach()
    losses = []
    for depth in range(1, depths + 1):
        if length <= depth + 1:
            break
        span = length - depth  # positions t whose token t+depth exists
        embeds = F.embedding(input_ids[:, depth:], embedding)  # [B, span, H]
        x = layer.project(previous[:, :span], embeds)
        seen = valid[:, depth:]  # the embedded token is a real one
        allowed = seen[:, None, :] & torch.ones(span, span, dtype=torch.bool, device=x.device).tril()[None]
        previous = layer.feed_forward(x, self_attention(layer, model, x, positions[:, depth:], allowed[:, None]))
        # Position t predicts token t+depth+1: trained where the loss mask says so.
        targets = input_ids[:, depth + 1:]
        trained = loss_mask[:, depth + 1:].bool() & seen[:, :-1]
        logits = F.linear(layer.shared_head.norm(previous[:, :-1][trained]), head)
        nll = F.cross_entropy(logits.float(), targets[trained], reduction="none")
        rows = trained.nonzero(as_tuple=True)[0]
        totals = nll.new_zeros(batch).index_add(0, rows, nll)
        counts = torch.bincount(rows, minlength=batch).to(nll.dtype)
        has = counts > 0
        if has.any():
            losses.append((totals[has] / counts[has]).mean())
    return torch.stack(losses).mean() if losses else hidden.sum() * 0.0


def self_attention(layer: MtpLayer, model: nn.Module, x: torch.Tensor, position_ids: torch.Tensor,
                   allowed: torch.Tensor) -> torch.Tensor:
    """The layer's attention output over a whole sequence, each query seeing the keys `allowed` [B, 1, S, S] says."""
    attention = layer.self_attn
    normed = layer.input_layernorm(x)
    q_resid, q_nope, q_rope, latent, k_rope = mla_projections(attention, normed, rotary(model, normed, position_ids))
    output, _ = masked_attention(attention, q_nope, q_rope, latent, k_rope, allowed)
    return attention.o_proj(output)
