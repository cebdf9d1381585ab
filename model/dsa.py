"""A trainable, deterministic DSA lightning indexer for transformers' `GlmMoeDsaForCausalLM`.

transformers' `GlmMoeDsaIndexer` runs under `no_grad`, so it cannot be warmed up, and its `topk` breaks exact
ties (ReLU scores of 0 are common) differently for different key counts, so decoding with a KV cache and a full
re-forward of the same tokens can attend to different keys: the SPEC's reasoning RL needs them to agree.
`DsaIndexer` replaces it in place with the same parameter names, so checkpoints stay plain transformers ones.

Indexer warm-up (SPEC "Model"): `set_dense_attention(model, True)`, switch to eager attention, then per batch

    with recording_indexer_scores(model) as records:
        out = model(ids, attention_mask=mask, output_attentions=True)
    indexer_kl_loss(out.attentions, records, mask).backward()  # reaches only the indexers
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (
    GlmMoeDsaAttention,
    GlmMoeDsaIndexer,
    apply_rotary_pos_emb_interleave,
)


@dataclass
class IndexerRecord:
    """One indexer call, as the indexer loss needs it."""

    layer_idx: int
    scores: torch.Tensor  # [B, S, T] float32, -inf at masked keys; carries gradient to the indexer only
    selected: torch.Tensor  # [B, S, k] int64: the keys the main attention was restricted to


def stable_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The `k` highest-scoring keys of each query, equal scores going to the most recent key.

    Ranking by (score, position) makes a query's choice independent of the keys after it: with a KV cache they
    do not exist, in a full forward they are -inf and sort behind every valid key. `torch.topk` promises no
    order among equal scores, and in practice picks differently for different key counts.
    """
    # A stable sort keeps equal scores in key order; on the flipped key axis that order is newest first.
    newest_first = torch.sort(scores.flip(-1), dim=-1, descending=True, stable=True).indices[..., :k]
    return scores.shape[-1] - 1 - newest_first


class DsaIndexer(GlmMoeDsaIndexer):
    """`GlmMoeDsaIndexer` with gradients for its own loss, a tie-stable top-k, and a dense switch."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        self.dense = False  # select every key, so the main attention is dense (indexer warm-up)
        self.score_keys = True  # compute the scores when dense too (the warm-up's loss needs them)
        self.recording = False
        self.record: IndexerRecord | None = None  # the last call's, while recording

    def forward(
        self,
        hidden_states: torch.Tensor,
        q_resid: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,  # unused, as in transformers; kept so the call signature matches
        cache: Cache | None = None,
    ) -> torch.Tensor:
        # Nothing will read the scores: skip the indexer. A KV cache filled meanwhile gets no indexer keys,
        # so a generation started this way must finish dense.
        if self.dense and not self.score_keys:
            batch_size, queries, keys = *hidden_states.shape[:2], attention_mask.shape[-1]
            return torch.arange(keys, device=hidden_states.device, dtype=torch.int32).expand(batch_size, queries, keys)
        # Detached inputs: only the indexer loss trains the indexer, and it never reaches the rest of the model.
        # The graph is built whenever grad is on, recording or not: gradient checkpointing recomputes this call
        # after the recording has ended and needs the same graph. Unrecorded, it is freed on return.
        scores = self.index_scores(hidden_states.detach(), q_resid.detach(), position_embeddings, attention_mask, cache)
        if self.dense:
            selected = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
        else:
            selected = stable_topk(scores.detach(), min(self.index_topk, scores.shape[-1]))
        if self.recording:
            self.record = IndexerRecord(self.layer_idx, scores, selected)
        return selected.to(torch.int32)

    def index_scores(self, hidden_states, q_resid, position_embeddings, attention_mask, cache) -> torch.Tensor:
        """I[b, t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]), computed as transformers computes it; [B, S, T]."""
        batch_size, seq_len, _ = hidden_states.shape
        rope_split = [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim]
        q = self.wq_b(q_resid).view(batch_size, seq_len, self.n_heads, self.head_dim)
        q_rot, q_pass = torch.split(q, rope_split, dim=-1)
        k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, rope_split, dim=-1)
        cos, sin = position_embeddings
        q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)  # [B, S, H, D]
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)  # [B, S, D]
        if cache is not None:
            k = cache.update_indexer(k, self.layer_idx)  # [B, T, D]

        per_head = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale)
        weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float() * self.n_heads**-0.5
        scores = torch.matmul(weights.unsqueeze(-2), per_head).squeeze(-2)

        # The mask is boolean or additive (0 / dtype-min). -inf rather than dtype-min keeps masked keys out of
        # the indexer's softmax and behind every valid key in the top-k.
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        return scores.masked_fill(~allowed, float("-inf"))


def install_dsa_indexers(model: nn.Module) -> list[DsaIndexer]:
    """Replace every layer's indexer by a `DsaIndexer`, in layer order; installing twice changes nothing.

    The replacement takes over the stock indexer's submodules, so parameters keep their identity, dtype,
    device and `requires_grad` (an optimizer built earlier still holds the right tensors).
    """
    indexers = []
    for attention in [m for m in model.modules() if isinstance(m, GlmMoeDsaAttention)]:
        if attention.indexer is None:  # a "shared" layer reuses the previous layer's selection
            continue
        if not isinstance(attention.indexer, DsaIndexer):
            stock = attention.indexer
            with torch.device("meta"):  # its own freshly initialised weights are replaced right away
                replacement = DsaIndexer(stock.config, stock.layer_idx)
            for name, child in stock.named_children():
                setattr(replacement, name, child)
            attention.indexer = replacement.train(stock.training)
        indexers.append(attention.indexer)
    return indexers


def set_dense_attention(model: nn.Module, dense: bool, score_keys: bool = True) -> None:
    """Dense: every query attends to all its causal keys; the indexer still scores them for its loss
    unless `score_keys` is False, which skips the indexer (dense training before DSA is switched on,
    dense evaluation)."""
    for indexer in install_dsa_indexers(model):
        indexer.dense, indexer.score_keys = dense, score_keys


@contextlib.contextmanager
def recording_indexer_scores(model: nn.Module) -> Iterator[list[IndexerRecord]]:
    """Record each indexer's scores and selection during the block, for `indexer_kl_loss`.

    The yielded list is filled when the block exits: one record per indexer, its last call, in layer order.
    """
    indexers = install_dsa_indexers(model)
    records: list[IndexerRecord] = []
    for indexer in indexers:
        indexer.recording, indexer.record = True, None
    try:
        yield records
    finally:
        for indexer in indexers:
            if indexer.record is not None:
                records.append(indexer.record)
            # Dropping the record frees its graph once the caller is done with the list.
            indexer.recording, indexer.record = False, None


def indexer_kl_loss(
    attentions: Sequence[torch.Tensor | None],
    records: Sequence[IndexerRecord],
    attention_mask: torch.Tensor | None = None,
    restrict_to_selected: bool = False,
) -> torch.Tensor:
    """GLM-5 / DeepSeek-V3.2 indexer loss: KL(p ‖ softmax(I)), averaged over non-padding queries and layers.

    p is the layer's main attention (`attentions`, from `output_attentions=True` under eager attention) summed
    over heads and L1-normalised per query, detached. `attention_mask` is the [B, S] padding mask the model got.
    Warm-up runs with dense attention over all causal keys; `restrict_to_selected` (the sparse phase)
    renormalises both distributions over the keys each query selected.
    """
    if not records:
        raise ValueError("no indexer records: call the model inside `recording_indexer_scores`, loss after it")
    layer_losses = []
    for record in records:
        # Without eager attention transformers returns no probabilities (an empty tuple, or None per layer).
        if record.layer_idx >= len(attentions) or attentions[record.layer_idx] is None:
            raise ValueError("attention probabilities missing: use eager attention and output_attentions=True")
        attention = attentions[record.layer_idx]
        target = attention.detach().float().sum(dim=1)  # [B, S, T]
        logits = record.scores
        if restrict_to_selected:
            selected = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, record.selected, True)
            target = target.masked_fill(~selected, 0)
            logits = logits.masked_fill(~selected, float("-inf"))
        if attention_mask is None:
            target, logits = target.flatten(0, 1), logits.flatten(0, 1)
        else:  # padding queries may have no valid key at all: drop them before any softmax
            valid = attention_mask.bool()
            target, logits = target[valid], logits[valid]
        target = target / target.sum(dim=-1, keepdim=True)
        log_q = torch.log_softmax(logits, dim=-1)
        # Keys without target mass add exactly 0, even where log_q is -inf (0 · -inf would be NaN).
        per_query = (torch.xlogy(target, target) - target * log_q.masked_fill(target == 0, 0)).sum(dim=-1)
        layer_losses.append(per_query.mean())
    return torch.stack(layer_losses).mean()
