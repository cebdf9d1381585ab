"""One decoding step of GLM-5's architecture (`GlmMoeDsaForCausalLM` with DSA sparse-gather attention) written for
serving, as SGLang serves from its own model code rather than transformers' modules: the model's forward over one
new token per row with the KV cache, or over a few (a speculative verification: `DecodeStep.forward`), up to float
rounding (tests/test_decode_step.py), in fewer operations. A
decoding step of a small model costs its operations' count more than their arithmetic: on a 2-core CPU,
glm5-tiny's step ran about 1,000 tensor operations through transformers' modules and their hooks.

What it folds, once per weight version (`refresh`: after loading, after every weight update):
- MLA's weight absorption (model/dsa_gather.py) into the query projection: a head's latent-space query is
  (W_uk,hᵀ W_qb,nope,h) q_resid, one product, the softmax scale included.
- RoPE's interleaved pairs: transformers rotates by slicing even and odd columns, four products and a
  concatenation per tensor. Here each rotary projection's rows come permuted into rotate-half order, followed by
  the same rows already turned a quarter (−odd, even), so that rotating is x·cos + x′·sin with the model's own
  cos and sin (`cat(freqs, freqs)`: the halves' angles). The indexer's keys are normalised after their
  projection, so their quarter turn is a product with a fixed ±1 matrix after the norm instead.
- The projections that read the same input, as one product: the layer's input into q_a, kv_a and the indexer's
  key; q_resid into the heads' queries and the indexer's.
- Few experts (`EVERY_EXPERT_UP_TO`) are computed for every token at once, each token mixing the ones it was
  routed to.

Everything else is the model's own: its embedding, norms' weights, routers (called as modules, so the routing
capture's hooks see every choice), DSA's tie-stable top-k (model/dsa.py), transformers' cache (the prefill writes
it, this step appends to it). The prefill, and a model this step does not cover (`covers`), run transformers'
forward. On glm5-tiny, 32 rows of 24-token prompts decoding 64 tokens, a 2-core CPU: 216 ms per batch against
transformers' forward's 326 (medians of 3 alternating rounds).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model.dsa import stable_topk
from model.dsa_gather import SPARSE_GATHER
from model.mtp import main_layers

# A decoding step computes every expert on every token, where there are at most this many times as many experts as
# a token is routed to, rather than each token's own: on glm5-tiny (4 experts, 2 per token) a layer's experts took
# 102 µs against the grouped kernel's 204 µs for 32 tokens (35 against 108 for 2), the same outputs (bitwise at 32)
# — the grouped kernel's sorting and indexing cost more than the twice the products. GLM-5's 256 experts, 8 per
# token, go through the model's own kernel.
EVERY_EXPERT_UP_TO = 2


def covers(model: torch.nn.Module) -> bool:
    """A GlmMoeDsa causal LM served with sparse-gather attention, SiLU MLPs and RMS norms as transformers builds it."""
    config = getattr(model, "config", None)
    return (getattr(config, "model_type", None) == "glm_moe_dsa" and config._attn_implementation == SPARSE_GATHER
            and config.hidden_act == "silu" and config.rope_parameters.get("rope_type") == "default")


def quarter_turn(width: int, rotary: int) -> torch.Tensor:
    """[width, width] ±1 matrix: x @ it is rotate-half of x's first `rotary` columns (−second half, first half),
    zeros for the rest. Products with ±1 and sums with zeros are exact."""
    turn = torch.zeros(width, width)
    half = rotary // 2
    for j in range(half):
        turn[j + half, j] = -1.0
        turn[j, j + half] = 1.0
    return turn


def rotary_rows(weight: torch.Tensor) -> torch.Tensor:
    """A projection's interleaved rotary rows [R, in] as [2R, in]: in rotate-half order, then turned a quarter."""
    even, odd = weight[0::2], weight[1::2]
    return torch.cat([even, odd, -odd, even])


@dataclass
class FoldedIndexer:
    key_norm: torch.Tensor  # the keys' LayerNorm, its columns in rotate-half order
    key_norm_bias: torch.Tensor
    key_eps: float
    turn: torch.Tensor  # [Di, Di]: `quarter_turn`
    head_weights: torch.Tensor  # [Hi, hidden], in the dtype the model keeps them (float32 where it loads them so)
    head_scale: float  # both of the indexer's scales
    heads: int
    width: int
    topk: int


@dataclass
class FoldedAttention:
    # One product of the layer's input for every projection that reads it: q_a (q_lora), kv_a (L latent, then the
    # rotary key: R, R turned) and the indexer's key (Di, rotary columns in rotate-half order), in that order.
    inputs: torch.Tensor
    inputs_bias: torch.Tensor | None
    widths: list[int]
    q_a_norm: torch.Tensor
    q_a_eps: float
    kv_norm: torch.Tensor
    kv_eps: float
    # One product of q_resid: per head the absorbed nope query (L), rotary (R), turned rotary (R), all scaled; then
    # the indexer's queries, per head rotary + pass (Di) and turned rotary + zeros (Di).
    from_q_resid: torch.Tensor
    w_uv: torch.Tensor  # [H, L, Dv]
    o_proj: torch.Tensor
    o_bias: torch.Tensor | None
    indexer: FoldedIndexer | None


def fold_attention(attention, with_indexer: bool = True) -> FoldedAttention:
    """`attention`'s weights folded for serving; `with_indexer` False leaves its DSA indexer out (a layer that
    attends densely: the MTP layer drafting)."""
    heads, nope, rope, latent = attention.num_heads, attention.qk_nope_head_dim, attention.qk_rope_head_dim, \
        attention.kv_lora_rank
    dtype = attention.q_b_proj.weight.dtype
    q_b = attention.q_b_proj.weight.float().view(heads, nope + rope, -1)
    w_kv = attention.kv_b_proj.weight.float().view(heads, nope + attention.v_head_dim, latent)
    w_uk, w_uv = w_kv[:, :nope], w_kv[:, nope:]
    absorbed = torch.einsum("hnl,hnq->hlq", w_uk, q_b[:, :nope])  # [H, L, q_lora]
    turned = torch.stack([rotary_rows(q_b[head, nope:]) for head in range(heads)])  # [H, 2R, q_lora]
    from_q_resid = [(torch.cat([absorbed, turned], dim=1) * attention.scaling).flatten(0, 1).to(dtype)]
    q_a, kv_a = attention.q_a_proj, attention.kv_a_proj_with_mqa
    inputs = [q_a.weight, kv_a.weight[:latent], rotary_rows(kv_a.weight[latent:])]
    biases = [q_a.bias, kv_a.bias if kv_a.bias is None else
              torch.cat([kv_a.bias[:latent], rotary_rows(kv_a.bias[latent:, None])[:, 0]])]
    indexer = None
    if attention.indexer is not None and with_indexer:
        stock = attention.indexer
        index_heads, width, index_rope = stock.n_heads, stock.head_dim, stock.qk_rope_head_dim
        order = torch.cat([torch.arange(0, index_rope, 2), torch.arange(1, index_rope, 2),
                           torch.arange(index_rope, width)])
        inputs.append(stock.wk.weight[order])
        biases.append(stock.wk.bias if stock.wk.bias is None else stock.wk.bias[order])
        q = stock.wq_b.weight.view(index_heads, width, -1)
        for head in range(index_heads):
            ordered, quarter = rotary_rows(q[head, :index_rope]).split(index_rope)
            from_q_resid += [ordered, q[head, index_rope:], quarter, torch.zeros_like(q[head, index_rope:])]
        indexer = FoldedIndexer(
            key_norm=stock.k_norm.weight[order], key_norm_bias=stock.k_norm.bias[order], key_eps=stock.k_norm.eps,
            turn=quarter_turn(width, index_rope).to(stock.wk.weight),
            head_weights=stock.weights_proj.weight, head_scale=index_heads**-0.5 * stock.softmax_scale,
            heads=index_heads, width=width, topk=attention.config.index_topk)
    widths = [inputs[0].shape[0], inputs[1].shape[0] + inputs[2].shape[0], *(part.shape[0] for part in inputs[3:])]
    inputs_bias = None if all(bias is None for bias in biases) else torch.cat(
        [torch.zeros(width, dtype=dtype, device=q_a.weight.device) if bias is None else bias for width, bias in zip(widths, biases, strict=True)])
    return FoldedAttention(
        inputs=torch.cat(inputs), inputs_bias=inputs_bias, widths=widths,
        q_a_norm=attention.q_a_layernorm.weight, q_a_eps=attention.q_a_layernorm.variance_epsilon,
        kv_norm=attention.kv_a_layernorm.weight, kv_eps=attention.kv_a_layernorm.variance_epsilon,
        from_q_resid=torch.cat(from_q_resid), w_uv=w_uv.transpose(1, 2).contiguous().to(dtype),
        o_proj=attention.o_proj.weight, o_bias=attention.o_proj.bias, indexer=indexer)


class DecodeStep:
    """`forward(tokens, positions, cache, masked)`: the model's last hidden states [B, S, H] (after its final norm,
    what its LM head and the MTP layer read) over S new tokens per row [B, S] at `positions` [B, S], their keys
    appended to `cache` (transformers' DynamicCache, as the prefill left it), each query hiding the keys `masked`
    [B, S, T] says (T: the cache's columns, the new ones included). A plain decoding step is S = 1; a speculative
    verification feeds the last sampled token and the drafts after it."""

    def __init__(self, model: torch.nn.Module):
        self.trunk = model.get_decoder()
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Fold the weights the model holds now: after loading and after every weight update."""
        self.layers = [fold_attention(layer.self_attn) for layer in main_layers(self.trunk)]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache, masked: torch.Tensor) -> torch.Tensor:
        trunk = self.trunk
        hidden = F.embedding(tokens, trunk.embed_tokens.weight)  # [B, S, hidden]
        cos, sin = trunk.rotary_emb(hidden, positions)  # [B, S, R]
        index = next((layer.indexer for layer in self.layers if layer.indexer is not None), None)
        # The indexer's heads are wider than the rotary part: the rest passes unturned (cos 1, sin 0).
        turning = None if index is None else (F.pad(cos, (0, index.width - cos.shape[-1]), value=1.0),
                                              F.pad(sin, (0, index.width - sin.shape[-1])))
        selected = None  # every key; a "shared" indexer layer reuses the selection of the layer before it
        for layer_idx, (layer, folded) in enumerate(zip(main_layers(trunk), self.layers, strict=True)):
            attended, selected = self.attend(folded, layer.self_attn, rms(hidden, layer.input_layernorm), cos, sin,
                                             turning, cache, layer_idx, masked, selected)
            hidden = hidden + attended
            hidden = hidden + feed_forward(layer.mlp, rms(hidden, layer.post_attention_layernorm))
        return rms(hidden, trunk.norm)

    def attend(self, folded: FoldedAttention, attention, x, cos, sin, turning, cache, layer_idx: int,
               masked: torch.Tensor, selected: torch.Tensor | None):
        projected = project(folded, attention, x, cos, sin)
        latents, k_ropes = cache.update(projected.latent[:, None], projected.k_rope[:, None], layer_idx)
        if folded.indexer is not None:
            selected = select_keys(folded.indexer, x, projected.index_key, projected.index_queries, turning, cache,
                                   layer_idx, masked)
        attended = latent_attention(folded, projected.q_latent, projected.q_rope, latents[:, 0], k_ropes[:, 0], masked,
                                    selected)
        return F.linear(attended, folded.o_proj, folded.o_bias), selected


@dataclass
class Projected:
    """One layer's queries and new keys for S tokens per row, rotary applied (rotate-half order, as cached)."""

    q_latent: torch.Tensor  # [B, S, H, L]: absorbed, scaled
    q_rope: torch.Tensor  # [B, S, H, R]: scaled
    latent: torch.Tensor  # [B, S, L]: normed
    k_rope: torch.Tensor  # [B, S, R]
    index_key: torch.Tensor | None  # [B, S, Di]: before its norm
    index_queries: torch.Tensor | None  # [B, S, Hi · 2Di]: before rotary


def project(folded: FoldedAttention, attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Projected:
    batch, span = x.shape[:2]
    heads, latent_width, rope = attention.num_heads, attention.kv_lora_rank, attention.qk_rope_head_dim
    q_a, kv, *index_key = F.linear(x, folded.inputs, folded.inputs_bias).split(folded.widths, dim=-1)
    q_resid = rms_weighted(q_a, folded.q_a_norm, folded.q_a_eps)
    from_q_resid = F.linear(q_resid, folded.from_q_resid)
    query_width = heads * (latent_width + 2 * rope)
    q = from_q_resid[..., :query_width].view(batch, span, heads, latent_width + 2 * rope)
    q_rope = q[..., latent_width:latent_width + rope] * cos[:, :, None] + q[..., latent_width + rope:] * sin[:, :, None]
    latent = rms_weighted(kv[..., :latent_width], folded.kv_norm, folded.kv_eps)
    k_rope = kv[..., latent_width:latent_width + rope] * cos + kv[..., latent_width + rope:] * sin
    indexed = folded.indexer is not None
    return Projected(q[..., :latent_width], q_rope, latent, k_rope, index_key[0] if indexed else None,
                     from_q_resid[..., query_width:] if indexed else None)


def latent_attention(folded: FoldedAttention, q_latent, q_rope, latents, k_ropes, masked: torch.Tensor,
                     selected: torch.Tensor | None) -> torch.Tensor:
    """The heads' outputs [B, S, H·Dv] (before o_proj) of queries [B, S, H, ·] over keys [B, T, ·] in MLA's latent
    space: every key but the `masked` [B, S, T] ones, or each query's `selected` [B, S, k] only."""
    batch, span, heads, latent_width = q_latent.shape
    if selected is None:  # one [S·H, L+R] × [L+R, T] product per row
        q_latent, q_rope = q_latent.reshape(batch, span * heads, -1), q_rope.reshape(batch, span * heads, -1)
    else:  # each query's selected keys: [B·S, k, ·]
        topk = selected.shape[-1]
        rows = (selected + torch.arange(batch, device=selected.device)[:, None, None] * latents.shape[1]).flatten(1)
        latents, k_ropes = (part.flatten(0, 1)[rows].view(batch * span, topk, -1) for part in (latents, k_ropes))
        masked = masked.gather(2, selected)
        q_latent, q_rope = q_latent.reshape(batch * span, heads, -1), q_rope.reshape(batch * span, heads, -1)
    logits = torch.baddbmm(torch.bmm(q_rope, k_ropes.transpose(1, 2)), q_latent, latents.transpose(1, 2))
    logits.view(batch, span, heads, -1).masked_fill_(masked[:, :, None, :], torch.finfo(logits.dtype).min)
    probs = F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).to(q_latent.dtype)
    out = torch.bmm(probs, latents).view(batch * span, heads, latent_width)
    return torch.bmm(out.transpose(0, 1), folded.w_uv).transpose(0, 1).reshape(batch, span, -1)  # [H, B·S, Dv] first


def select_keys(indexer: FoldedIndexer, x, key, queries, turning, cache, layer_idx: int, masked) -> torch.Tensor | None:
    """The indexer's keys of the new tokens (`key` [B, S, Di], before its norm) appended to the cache, and each
    query's `stable_topk` keys [B, S, k] in key order; None (every key) while no row has more keys than the top-k, as
    `DsaAttention` does."""
    cos, sin = turning
    key = F.layer_norm(key, (indexer.width,), indexer.key_norm, indexer.key_norm_bias, indexer.key_eps)
    keys = cache.update_indexer(key * cos + (key @ indexer.turn) * sin, layer_idx)  # [B, T, Di]
    if keys.shape[1] <= indexer.topk:
        return None
    batch, span = x.shape[:2]
    q = queries.view(batch, span, indexer.heads, 2 * indexer.width)
    q = q[..., :indexer.width] * cos[:, :, None] + q[..., indexer.width:] * sin[:, :, None]
    per_head = torch.bmm(q.reshape(batch, span * indexer.heads, -1).float(), keys.float().transpose(1, 2)).relu_()
    weights = F.linear(x.to(indexer.head_weights.dtype), indexer.head_weights).float() * indexer.head_scale
    scores = torch.bmm(weights.view(batch * span, 1, indexer.heads), per_head.view(batch * span, indexer.heads, -1))
    scores = scores.view(batch, span, -1).masked_fill_(masked, float("-inf"))  # [B, S, T]
    return stable_topk(scores, indexer.topk)


def feed_forward(mlp, x: torch.Tensor) -> torch.Tensor:
    """The layer's MLP or MoE over x [..., hidden]."""
    if not hasattr(mlp, "experts"):
        return silu_mlp(mlp, x)
    if x.dim() > 2:  # the router reads tokens as rows, as the model's MoE does
        return feed_forward(mlp, x.reshape(-1, x.shape[-1])).view_as(x)
    _, weights, chosen = mlp.gate(x)  # the module: routing capture's hooks see its choice
    experts = mlp.experts
    if experts.num_experts > EVERY_EXPERT_UP_TO * chosen.shape[-1]:
        routed = experts(x, chosen, weights)
    else:  # every expert on every token, each token's output mixed by its routing weights (0 where not chosen)
        gate, up = torch.matmul(x, experts.gate_up_proj.transpose(1, 2)).chunk(2, dim=-1)  # [E, B, I] each
        outputs = torch.matmul(F.silu(gate) * up, experts.down_proj.transpose(1, 2))  # [E, B, hidden]
        mixing = torch.zeros(x.shape[0], experts.num_experts, dtype=weights.dtype, device=x.device)
        routed = (outputs * mixing.scatter_(1, chosen, weights).T[:, :, None].to(outputs.dtype)).sum(dim=0)
    return routed + silu_mlp(mlp.shared_experts, x)


def silu_mlp(mlp, x: torch.Tensor) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight), mlp.down_proj.weight)


def rms(x: torch.Tensor, norm) -> torch.Tensor:
    return rms_weighted(x, norm.weight, norm.variance_epsilon)


def rms_weighted(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm: normalised in float32, weighted in the input's dtype. In float32, one fused operation
    (the same products; a step pays for each operation it dispatches)."""
    if x.dtype == torch.float32 == weight.dtype:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)
