"""Sparse-gather attention for DSA: each query attends over the K/V rows of its selected keys only.

transformers' eager and SDPA paths turn the indexer's top-k into a mask over a full [B, H, S, T] attention, so
DSA costs dense attention plus the indexer. Under `model.set_attn_implementation(SPARSE_GATHER)` transformers
hands the top-k to this function instead (`indices`, as it does for FlashMLA's sparse kernel) and the attention
costs O(S·k) rather than O(S·T). The result equals the masked path's: the same logits over the selected keys,
the same softmax, keys outside the top-k contributing exactly nothing there (exp of dtype-min is 0).

Queries are processed in chunks so the gathered K/V of a long sequence are never all alive at once; with
gradients on, each chunk is recomputed in backward (activation checkpointing) instead of kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

SPARSE_GATHER = "dsa_sparse_gather"
# Gathered key elements (heads × queries × selected keys × head dim) per chunk: 64 MiB in float32.
GATHER_CHUNK_ELEMENTS = 1 << 24


def allowed_keys(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, S, T] True where a query may see a key, from transformers' [B, 1, S, T] mask (boolean or additive)."""
    mask = attention_mask[:, 0]
    return mask if mask.dtype == torch.bool else mask == 0


def _attend(query, key_rows, value_rows, indices, allowed, scaling: float, dropout: float, training: bool):
    """One chunk of queries [B, H, c, D] over their selected keys `indices` [B, c, k]; `allowed` [B, c, k].

    `key_rows`/`value_rows` are [B, T, H, D]: one key's heads side by side, so selecting a key copies one
    contiguous row (MLA's heads share the key's index) rather than gathering element by element.
    """
    batch = torch.arange(query.shape[0], device=indices.device)[:, None, None]
    keys, values = key_rows[batch, indices], value_rows[batch, indices]  # [B, c, k, H, D]
    logits = torch.einsum("bhqd,bqkhd->bhqk", query, keys) * scaling
    # dtype-min, as transformers' additive masks: a padding query that sees no key stays finite, as in eager.
    logits = logits.masked_fill(~allowed.unsqueeze(1), torch.finfo(logits.dtype).min)
    probs = F.softmax(logits, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=training)
    return torch.einsum("bhqk,bqkhd->bhqd", probs, values), probs


def sparse_gather_attention(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0,
                            indices: torch.Tensor | None = None, **_kwargs):
    """transformers' attention-function signature: query [B, H, S, D], key/value [B, H, T, D], `indices` the
    indexer's [B, S, k] selection. Returns the output [B, S, H, Dv] and the probabilities over the selected
    keys [B, H, S, k], in `indices`' order (the indexer loss of the sparse phase reads them)."""
    if indices is None:
        raise ValueError(f"{SPARSE_GATHER!r} attention needs the DSA indexer's top-k: use it on a DSA model only")
    if attention_mask is None:
        raise ValueError(f"{SPARSE_GATHER!r} attention needs the model's [B, 1, S, T] mask")
    indices = indices.long()
    allowed = allowed_keys(attention_mask).gather(-1, indices)
    batch, heads, queries, head_dim = query.shape
    chunk = max(1, GATHER_CHUNK_ELEMENTS // (heads * indices.shape[-1] * max(head_dim, value.shape[-1])))
    recompute = torch.is_grad_enabled() and queries > chunk
    key_rows, value_rows = key.transpose(1, 2).contiguous(), value.transpose(1, 2).contiguous()
    outputs, probabilities = [], []
    for start in range(0, queries, chunk):
        part = slice(start, start + chunk)
        args = (query[:, :, part], key_rows, value_rows, indices[:, part], allowed[:, part], scaling, dropout,
                module.training)
        output, probs = checkpoint(_attend, *args, use_reentrant=False) if recompute else _attend(*args)
        outputs.append(output)
        probabilities.append(probs)
    output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)
    probs = probabilities[0] if len(probabilities) == 1 else torch.cat(probabilities, dim=2)
    return output.transpose(1, 2).contiguous(), probs


# Registered under its own name, with SDPA's boolean [B, 1, S, T] mask (which the indexer reads as well).
AttentionInterface.register(SPARSE_GATHER, sparse_gather_attention)
AttentionMaskInterface.register(SPARSE_GATHER, sdpa_mask)
