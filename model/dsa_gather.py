"""Sparse-gather attention for DSA: each query attends over its selected keys only, in MLA's latent space.

transformers' eager and SDPA paths turn the indexer's top-k into a mask over a full [B, H, S, T] attention, so
DSA costs dense attention plus the indexer. Under `model.set_attn_implementation(SPARSE_GATHER)` our
`DsaAttention` (model/dsa.py) hands its queries, the cached latents and the top-k to `latent_sparse_attention`
instead, which costs O(S·k) rather than O(S·T).

It uses MLA's weight absorption, as DeepSeek-V3.2's sparse kernels do: a key's heads all come from one latent
row c (kv_lora_rank) and one shared RoPE key r, and kv_b_proj has no bias, so for head h

    q_h · k_h = (W_uk,hᵀ q_nope,h) · c + q_rope,h · r        Σ_j p_hj v_hj = W_uv,h (Σ_j p_hj c_j)

A selected key then costs one contiguous row of kv_lora_rank + rope floats, shared by every head, instead of
the heads' expanded keys and values. The result equals the masked path's up to float rounding: the same logits
over the selected keys, the same softmax, keys outside the top-k contributing exactly nothing there.

Queries are processed in chunks so the gathered rows of a long sequence are never all alive at once; backward
gathers each chunk's rows again and recomputes its probabilities instead of keeping them (`SparseLatentAttention`).

Gathering pays only on long sequences: a selected key costs a gathered row per query where a dense product
costs a slice of one matrix product. Up to `MASKED_KEYS_PER_TOPK` keys per selected key (measured below),
`masked_attention` computes the same attention as the selection masked over SDPA instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

SPARSE_GATHER = "dsa_sparse_gather"
# Gathered latent elements (queries × selected keys × latent width) per chunk: 16 MiB in float32.
GATHER_CHUNK_ELEMENTS = 1 << 22
# Up to this many keys per selected key, a query's logits over every key with the others masked out (SDPA over
# the heads' keys) cost less than gathering its selected latent rows. Forward + backward of one layer on a 2-core
# CPU, gather's time / masked's, without and with the probabilities the indexer loss reads: glm5-tiny (top-k 48,
# 32 sequences) 3.2 / 1.6 at 300 keys, 2.8 / 1.3 at 400, 1.9 / 0.8 at 600; glm5-small (top-k 64, 4 sequences)
# 4.5 / 3.7 at 128, 3.8 / 3.0 at 256, 3.1 / 1.9 at 512, 2.6 / 1.5 at 768.
MASKED_KEYS_PER_TOPK = 8
# The masked path's [B, H, S, T] logits stay under 256 MiB in float32; longer batches gather.
MASKED_LOGITS_ELEMENTS = 1 << 26


def allowed_keys(mask: torch.Tensor) -> torch.Tensor:
    """True where a query may see a key, from a transformers mask of any shape (boolean, or additive 0 / min)."""
    return mask if mask.dtype == torch.bool else mask == 0


def _attend(queries, rows, indices, allowed, w_uv, latent_width: int, scaling: float, dropout: float,
            training: bool):
    """One chunk as autograd computes it, for attention dropout (`SparseLatentAttention` has none): `queries`
    [B, c, H, L+R] (absorbed nope part, then RoPE part) over the latent `rows` [B, T, L+R] at `indices` [B, c, k];
    `allowed` [B, c, k]. Returns [B, c, H, Dv] and probabilities [B, c, H, k]."""
    selected = _gathered(rows, indices)
    logits = torch.matmul(queries, selected.transpose(-1, -2)) * scaling
    probs = _softmax(logits, allowed).to(queries.dtype)
    probs = F.dropout(probs, p=dropout, training=training)
    # The RoPE columns' share of the output is dropped after the product: slicing `selected` instead would cost
    # a full-size zero-filled gradient in backward.
    latent_out = torch.matmul(probs, selected)[..., :latent_width]  # [B, c, H, L]
    return torch.einsum("bchl,hvl->bchv", latent_out, w_uv), probs


def _gathered(rows, indices):
    """The latent rows [B, T, W] at `indices` [B, c, k]: [B, c, k, W]. One contiguous row per key, shared by every
    head, looked up as an embedding."""
    batch, keys, width = rows.shape
    offsets = torch.arange(batch, device=indices.device)[:, None, None] * keys
    return F.embedding(indices + offsets, rows.reshape(batch * keys, width))


def _softmax(logits, allowed):
    """Probabilities over the selected keys, in float32 at least; dtype-min at the keys not allowed, as
    transformers' additive masks: a padding query that sees no key stays finite, as in eager."""
    logits = logits.masked_fill(~allowed.unsqueeze(-2), torch.finfo(logits.dtype).min)
    return F.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))


class SparseLatentAttention(torch.autograd.Function):
    """Attention over the gathered latent rows, chunk by chunk, with a hand-written backward in the manner of
    flash attention: nothing per chunk is kept, backward gathers the rows and recomputes the probabilities once
    (bitwise the forward's), and a selected row's two gradient terms — through the logits and through the
    output — are one product over [heads of the logits' gradient | heads of the probabilities]. Autograd with
    activation checkpointing re-ran the whole forward, made the two terms separately (each a product whose inner
    dimension is the few heads) and added them. bench/dsa_attention.py at 16K (glm5-small, 2-core CPU, medians of
    3 rounds): the layer's forward + backward 3.19 s against 3.74 s.

    queries [B, S, H, W] (absorbed nope part, then RoPE part), rows [B, T, W], indices and allowed [B, S, k].
    Returns the latent output [B, S, H, latent_width] and the probabilities [B, S, H, k] (no gradient: the
    indexer loss reads them as its target).
    """

    @staticmethod
    def forward(ctx, queries, rows, indices, allowed, scaling: float, latent_width: int, chunk: int):
        outputs, probabilities = [], []
        for start in range(0, queries.shape[1], chunk):
            part = slice(start, start + chunk)
            selected = _gathered(rows, indices[:, part])
            logits = torch.matmul(queries[:, part], selected.transpose(-1, -2)) * scaling
            probs = _softmax(logits, allowed[:, part]).to(queries.dtype)
            outputs.append(torch.matmul(probs, selected[..., :latent_width]))
            probabilities.append(probs)
        ctx.save_for_backward(queries, rows, indices, allowed)
        ctx.scaling, ctx.latent_width, ctx.chunk = scaling, latent_width, chunk
        probs = torch.cat(probabilities, dim=1)
        ctx.mark_non_differentiable(probs)
        return torch.cat(outputs, dim=1), probs

    @staticmethod
    def backward(ctx, grad_output, _grad_probs):
        queries, rows, indices, allowed = ctx.saved_tensors
        batch, keys, width = rows.shape
        offsets = torch.arange(batch, device=indices.device)[:, None, None] * keys
        grad_queries = torch.empty_like(queries)
        grad_rows = torch.zeros(batch * keys, width, dtype=rows.dtype, device=rows.device)
        # The output's gradient has no RoPE columns: zeros there, so one product makes a row's whole gradient.
        grad_output = F.pad(grad_output, (0, width - ctx.latent_width))
        for start in range(0, queries.shape[1], ctx.chunk):
            part = slice(start, start + ctx.chunk)
            chunk_queries, chunk_allowed, grad_out = queries[:, part], allowed[:, part], grad_output[:, part]
            selected = _gathered(rows, indices[:, part])  # [B, c, k, W]
            logits = torch.matmul(chunk_queries, selected.transpose(-1, -2)) * ctx.scaling
            probs = _softmax(logits, chunk_allowed)
            grad_probs = torch.matmul(grad_out, selected.transpose(-1, -2)).to(probs.dtype)  # [B, c, H, k]
            grad_logits = probs * (grad_probs - (grad_probs * probs).sum(dim=-1, keepdim=True))
            # Masked keys take no gradient (a padding query's uniform probabilities over them included).
            grad_logits = grad_logits.masked_fill_(~chunk_allowed.unsqueeze(-2), 0.0).mul_(ctx.scaling)
            grad_logits, probs = grad_logits.to(queries.dtype), probs.to(queries.dtype)
            grad_queries[:, part] = torch.matmul(grad_logits, selected)
            heads = torch.cat([grad_logits, probs], dim=2).transpose(-1, -2)  # [B, c, k, 2H]
            grad_selected = torch.matmul(heads, torch.cat([chunk_queries, grad_out], dim=2))  # [B, c, k, W]
            grad_rows.index_add_(0, (indices[:, part] + offsets).flatten(), grad_selected.reshape(-1, width))
        return grad_queries, grad_rows.view(batch, keys, width), None, None, None, None, None


def _absorbed(attention, q_nope, q_rope, latent, k_rope):
    """The absorbed queries [B, S, H, L+R], the latent rows [B, T, L+R] and W_uv [H, Dv, L] (module docstring)."""
    heads, latent_width = q_nope.shape[1], latent.shape[-1]
    w_kv = applied_weight(attention.kv_b_proj).view(heads, attention.qk_nope_head_dim + attention.v_head_dim,
                                                    latent_width)
    w_uk, w_uv = w_kv[:, : attention.qk_nope_head_dim], w_kv[:, attention.qk_nope_head_dim :]
    queries = torch.cat([torch.einsum("bhsn,hnl->bshl", q_nope, w_uk), q_rope.transpose(1, 2)], dim=-1)
    return queries, torch.cat([latent, k_rope], dim=-1), w_uv


def applied_weight(linear: torch.nn.Module) -> torch.Tensor:
    """The weight a linear layer's forward applies: a peft LoRA layer's base weight plus its active adapters'
    updates (with their gradient), else its weight. A LoRA layer's `.weight` is its base layer's alone: read
    directly, it would leave the adapters out of the absorbed attention and out of their gradient."""
    if not hasattr(linear, "get_delta_weight"):
        return linear.weight
    base = linear.get_base_layer().weight
    if linear.disable_adapters or linear.merged:
        return base
    adapters = [name for name in linear.active_adapters if name in linear.lora_A]
    return base + sum(linear.get_delta_weight(name).to(base.dtype) for name in adapters) if adapters else base


def latent_dense_attention(attention, q_nope, q_rope, latent, k_rope, attention_mask):
    """Every key, in MLA's latent space (module docstring): for decoding, where the queries are few and the
    cached keys many, reading the cached latent rows as they are costs less than expanding every cached key
    through kv_b_proj at each step (`masked_attention`). latent [B, T, L], k_rope [B, T, R]; returns [B, S, H·Dv]."""
    queries, rows, w_uv = _absorbed(attention, q_nope, q_rope, latent, k_rope)
    batch, length, heads, width = queries.shape
    keys = rows.shape[1]
    # One [S·H, L+R] × [L+R, T] product per sequence: a matmul broadcasting the rows over the queries would copy
    # them once per query.
    logits = torch.bmm((queries * attention.scaling).reshape(batch, length * heads, width), rows.transpose(1, 2))
    logits = logits.view(batch, length, heads, keys)
    logits.masked_fill_(~allowed_keys(attention_mask[:, 0]).unsqueeze(2), torch.finfo(logits.dtype).min)
    probs = F.softmax(logits, dim=-1, dtype=torch.float32).to(queries.dtype)
    probs = F.dropout(probs, p=attention.attention_dropout if attention.training else 0.0, training=attention.training)
    latent_out = torch.bmm(probs.view(batch, length * heads, keys), rows)
    latent_out = latent_out.view(batch, length, heads, width)[..., : latent.shape[-1]]  # [B, S, H, L]
    return torch.einsum("bshl,hvl->bshv", latent_out, w_uv).flatten(2)


def masked_attention(attention, q_nope, q_rope, latent, k_rope, attention_mask, selected=None,
                     probabilities: bool = False):
    """DSA as a mask: every key's logit, the keys outside `selected` [B, S, k] masked out (None: every key, for a
    sequence no longer than the top-k, where the selection is every key), in SDPA over the heads' expanded keys
    and values — transformers' own sparse path. The softmax gives the masked keys exactly 0, so the result is the
    gather path's up to float rounding; on short sequences it costs less (`short_enough_to_mask`).

    Takes latent [B, 1, T, L] and k_rope [B, 1, T, R] as the cache holds them. Returns the heads' outputs
    [B, S, H·Dv] and, with `probabilities`, the attention probabilities, detached (the indexer loss reads them as
    its target): [B, H, S, k] in `selected`'s order, or [B, H, S, T]; else None.
    """
    batch, heads, length, _ = q_nope.shape
    query = torch.cat([q_nope, q_rope], dim=-1)
    key, value = attention.expand_kv(latent, k_rope)  # [B, H, T, ·]
    allowed = allowed_keys(attention_mask[:, 0])  # [B, S, T]
    if selected is not None:
        allowed = allowed & torch.zeros_like(allowed).scatter_(-1, selected.long(), True)
    # A padding query sees no key: let it see every key instead, so it stays finite (a NaN output there would
    # reach real queries through their zero weights on it). Nothing reads a padding query's output.
    allowed = (allowed | ~allowed.any(dim=-1, keepdim=True)).unsqueeze(1)
    dropout = attention.attention_dropout if attention.training else 0.0
    output = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, dropout_p=dropout,
                                            scale=attention.scaling)
    output = output.transpose(1, 2).reshape(batch, length, -1)
    if not probabilities:
        return output, None
    with torch.no_grad():
        logits = torch.matmul(query * attention.scaling, key.transpose(-1, -2))  # [B, H, S, T]
        if selected is not None:  # the softmax over the selected keys only: the others would add exactly 0
            indices = selected.long().unsqueeze(1)
            logits = logits.gather(-1, indices.expand(-1, heads, -1, -1))
            allowed = allowed.gather(-1, indices)  # [B, 1, S, k]: the same for every head
        probs = logits.masked_fill_(~allowed, torch.finfo(logits.dtype).min).softmax(dim=-1, dtype=torch.float32)
    return output, probs.to(query.dtype)


def short_enough_to_mask(batch: int, queries: int, heads: int, keys: int, topk: int) -> bool:
    """Whether computing every key's logit and masking out the unselected ones (`masked_attention`; the indexer's
    scores the same way) costs less than gathering the selected keys: on short sequences, within a memory bound
    for a [B, S, H, T] tensor."""
    return keys <= MASKED_KEYS_PER_TOPK * topk and batch * queries * heads * keys <= MASKED_LOGITS_ELEMENTS


def latent_sparse_attention(attention, q_nope, q_rope, latent, k_rope, indices, attention_mask):
    """Sparse MLA attention of `attention` (a GlmMoeDsaAttention) in latent space.

    q_nope [B, H, S, Dn] and q_rope [B, H, S, R] (RoPE applied); latent [B, T, L] and k_rope [B, T, R] (the
    cache's, RoPE applied); `indices` the indexer's [B, S, k]; `attention_mask` transformers' [B, 1, S, T].
    Returns the heads' outputs [B, S, H·Dv] (before o_proj) and the probabilities over the selected keys
    [B, H, S, k], in `indices`' order (the indexer loss of the sparse phase reads them).
    """
    queries, rows, w_uv = _absorbed(attention, q_nope, q_rope, latent, k_rope)
    latent_width = latent.shape[-1]
    indices = indices.long()
    allowed = allowed_keys(attention_mask[:, 0]).gather(-1, indices)
    dropout = attention.attention_dropout if attention.training else 0.0

    chunk = max(1, GATHER_CHUNK_ELEMENTS // (indices.shape[-1] * rows.shape[-1]))
    if dropout == 0.0:
        latent_out, probs = SparseLatentAttention.apply(queries, rows, indices, allowed, attention.scaling,
                                                        latent_width, chunk)
        return torch.einsum("bshl,hvl->bshv", latent_out, w_uv).flatten(2), probs.transpose(1, 2)
    recompute = torch.is_grad_enabled() and queries.shape[1] > chunk
    outputs, probabilities = [], []
    # `split`, not slicing: the gradients of the chunks are put together once, where a slice's backward would
    # write a zero-filled gradient of the whole query tensor per chunk.
    for chunk_queries, chunk_indices, chunk_allowed in zip(
            queries.split(chunk, dim=1), indices.split(chunk, dim=1), allowed.split(chunk, dim=1), strict=True):
        args = (chunk_queries, rows, chunk_indices, chunk_allowed, w_uv, latent_width, attention.scaling, dropout,
                attention.training)
        output, probs = checkpoint(_attend, *args, use_reentrant=False) if recompute else _attend(*args)
        outputs.append(output)
        probabilities.append(probs)
    return torch.cat(outputs, dim=1).flatten(2), torch.cat(probabilities, dim=1).transpose(1, 2)


def _not_installed(*_args, **_kwargs):
    raise ValueError(f"{SPARSE_GATHER!r} attention runs in model.dsa.DsaAttention: switch it on with "
                     "model.dsa.set_dense_attention(model, False), which installs it")


# Registered under its own name so transformers accepts it, with SDPA's boolean [B, 1, S, T] mask (which the
# indexer reads as well). DsaAttention does the attention itself: it needs the latents, which transformers'
# attention functions never see.
AttentionInterface.register(SPARSE_GATHER, _not_installed)
AttentionMaskInterface.register(SPARSE_GATHER, sdpa_mask)
