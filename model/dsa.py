"""A trainable, deterministic DSA lightning indexer for transformers' `GlmMoeDsaForCausalLM`.

transformers' `GlmMoeDsaIndexer` runs under `no_grad`, so it cannot be warmed up, and its `topk` breaks exact
ties (ReLU scores of 0 are common) differently for different key counts, so decoding with a KV cache and a full
re-forward of the same tokens can attend to different keys: the SPEC's reasoning RL needs them to agree.
`DsaIndexer` replaces it in place with the same parameter names, so checkpoints stay plain transformers ones.

Sparse attention (`set_dense_attention(model, False)`) runs as sparse-gather attention (model/dsa_gather.py):
each query attends over its selected keys only, and the indexer scores keys a chunk of queries at a time, so
neither ever holds a [batch, queries, heads, keys] tensor. Where no query sees more keys than the top-k (a
sequence, or a cache, no longer than it: most of the demo's RL rollouts) the selection is every key and sparse is
dense exactly: the indexer is skipped and attention is SDPA over every key (decoding reads the cached latents
as they are). Up to a few times the top-k (`dsa_gather.short_enough_to_mask`) the selection is a mask over SDPA,
and the indexer scores every key once, which on such lengths costs less than gathering.

Indexer warm-up (SPEC "Model"): `set_dense_attention(model, True)`, switch to eager attention, then per batch

    with recording_indexer_scores(model) as records:
        out = model(ids, attention_mask=mask, output_attentions=True)
    indexer_kl_loss(out.attentions, records, mask).backward()  # reaches only the indexers

The sparse phase records the same way, with the scores of the selected keys only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import Cache
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (
    GlmMoeDsaAttention,
    GlmMoeDsaIndexer,
    apply_rotary_pos_emb_interleave,
)

from model.dsa_gather import (
    SPARSE_GATHER,
    allowed_keys,
    latent_dense_attention,
    latent_sparse_attention,
    masked_attention,
    short_enough_to_mask,
)

# Indexer scores (queries × heads × keys) computed at once when selecting keys: 16 MiB in float32.
SELECTION_CHUNK_ELEMENTS = 1 << 22
# Up to this many scores (a decoding step's: rows × keys), the top-k is one stable sort instead of torch.topk and the
# tie rule's repair: fewer operations, which is what a decoding step on a small model pays for.
SORTED_SELECTION_ELEMENTS = 1 << 15
# Up to this many indexer heads, scores with gradient weigh the heads by a broadcast multiply (weighted_over_heads).
ELEMENTWISE_HEAD_WEIGHTING = 4


@dataclass
class IndexerRecord:
    """One indexer call, as the indexer loss needs it."""

    layer_idx: int
    scores: torch.Tensor  # float32, -inf at masked keys; carries gradient to the indexer only. Dense: [B, S, T]
    # over every key; sparse: [B, S, k], the score of each selected key, in `selected`'s order.
    selected: torch.Tensor  # [B, S, k] int64: the keys the main attention was restricted to
    sparse: bool = False


def stable_topk(scores: torch.Tensor, k: int, in_key_order: bool = True) -> torch.Tensor:
    """The `k` highest-scoring keys of each query, in key order (else in no set order: for a mask, which reads
    the set only); equal scores go to the most recent keys.

    Ranking by (score, position) makes a query's choice independent of the keys after it: with a KV cache they
    do not exist, in a full forward they are -inf and sort behind every valid key. `torch.topk` promises no
    order among equal scores, and in practice picks differently for different key counts: its choice stands
    only where no key left out ties with the k-th score. The other queries (ReLU zeros, or fewer than k visible
    keys) take the keys above the k-th score and fill the remaining places with the newest keys equal to it;
    for a mask, a query with fewer than k visible keys keeps topk's choice (all of them, and masked keys).
    """
    if scores.numel() <= SORTED_SELECTION_ELEMENTS:
        # The same rule as one stable sort: by score, and among equal scores newest first (the keys reversed).
        newest_first = scores.flip(-1).sort(dim=-1, descending=True, stable=True).indices[..., :k]
        chosen = scores.shape[-1] - 1 - newest_first
        return chosen.sort(dim=-1).values if in_key_order else chosen
    values, chosen = scores.topk(k, dim=-1, sorted=False)
    kth = values.min(dim=-1, keepdim=True).values
    ambiguous = (scores >= kth).sum(dim=-1) > k  # a key left out ties with the k-th score
    if not in_key_order:
        # A mask reads only the set's visible keys: where fewer than k are visible (the k-th score is -inf), topk
        # chose every one of them already, whichever masked keys fill the rest. The first queries of every
        # sequence are such rows (over half of them, at glm5-tiny's training lengths).
        ambiguous &= kth[..., 0] > float("-inf")
    ambiguous = ambiguous.nonzero(as_tuple=True)
    if ambiguous[0].numel():
        rows, kth = scores[ambiguous], kth[ambiguous]
        tied = rows == kth
        places_left = k - (rows > kth).sum(dim=-1, keepdim=True)
        tied_from_newest = tied.flip(-1).cumsum(-1).flip(-1)  # 1 at the newest tied key, 2 at the next …
        exact = (rows > kth) | (tied & (tied_from_newest <= places_left))
        chosen = chosen.index_put(ambiguous, exact.nonzero()[:, -1].view(-1, k))  # k per row, in key order
    return chosen.sort(dim=-1).values if in_key_order else chosen


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
        q, k, weights = self.index_inputs(hidden_states.detach(), q_resid.detach(), position_embeddings, cache)
        allowed = allowed_keys(attention_mask)
        if self.dense:
            # The warm-up's loss reads every key's score. The graph is built whenever grad is on, recording or
            # not: gradient checkpointing recomputes this call after the recording has ended and needs the same
            # graph. Unrecorded, it is freed on return.
            scores = key_scores(q, k, weights, allowed, self.softmax_scale)
            selected = torch.arange(scores.shape[-1], device=scores.device).expand(scores.shape)
            sparse = False
        else:
            topk = min(self.index_topk, k.shape[1])
            # The sparse phase's loss reads the selected keys' scores only; a frozen indexer (RL) or no gradient
            # at all (evaluation, serving) reads none, unrecorded.
            wants_scores = q.requires_grad or self.recording
            # Applied as a mask, the selection is read as a set: no sort into key order.
            masked = masks_selection(self.config, *q.shape[:2], k.shape[1], topk)
            if wants_scores and masked:
                # One scoring of every key, with gradient: the selection reads it detached, the loss the selected
                # entries. Cheaper on a short sequence than scoring twice and gathering the selected keys.
                every = key_scores(q, k, weights, allowed, self.softmax_scale)
                selected = stable_topk(every.detach(), topk, in_key_order=False)
                scores = every.gather(-1, selected)
            else:
                with torch.no_grad():
                    selected = select_keys(q, k, weights, allowed, self.softmax_scale, topk, in_key_order=not masked)
                scores = selected_scores(q, k, weights, allowed, self.softmax_scale, selected) if wants_scores else None
            sparse = True
        if self.recording:
            self.record = IndexerRecord(self.layer_idx, scores, selected, sparse)
        return selected.to(torch.int32)

    def cache_keys(self, hidden_states: torch.Tensor, position_embeddings, cache: Cache) -> None:
        """Only what a KV cache needs of this call: the indexer's keys of the new tokens, so that a generation
        that scored no key while it was short (`DsaAttention`: every key is selected) can score them later."""
        k = self.k_norm(self.wk(hidden_states.detach()))  # [B, S, D]: one key head
        k_rot, k_pass = torch.split(k, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
        # transformers' interleaved rotary (apply_rotary_pos_emb_interleave) of the keys alone, the same operations:
        # called with the keys as queries too, it rotated them twice at every decoding step.
        cos, sin = (half[..., : half.shape[-1] // 2] for half in position_embeddings)
        k1, k2 = k_rot[..., 0::2], k_rot[..., 1::2]
        cache.update_indexer(torch.cat([k1 * cos - k2 * sin, k2 * cos + k1 * sin, k_pass], dim=-1), self.layer_idx)

    def index_inputs(self, hidden_states, q_resid, position_embeddings, cache):
        """The indexer's queries [B, S, H, D], keys [B, T, D] (through the cache) and head weights [B, S, H],
        in float32, computed as transformers computes them."""
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
        weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float() * self.n_heads**-0.5
        return q.float(), k.float(), weights


def key_scores(q, k, weights, allowed, scale: float) -> torch.Tensor:
    """I[b, t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]) over every key: [B, S, T], -inf where `allowed` is False.

    -inf rather than dtype-min keeps masked keys out of the indexer's softmax and behind every valid key in the
    top-k. The heads' products are one [S·H, D] × [D, T] product per sequence: a matmul broadcasting the keys over
    the queries copies them once per query ([B, S, D, T]), which cost more than the product. A chunk of queries, or
    one query decoding with a KV cache, scores as the whole sequence does up to float rounding (the per-query
    products did not make it bitwise either: matrix kernels round by shape). (The softmax scale, positive, goes
    into the head weights: ReLU(x)·s = ReLU(x·s) saves a pass over every score.)
    """
    batch, queries, heads, width = q.shape
    per_head = torch.bmm(q.reshape(batch, queries * heads, width), k.transpose(1, 2))
    per_head = per_head.view(batch, queries, heads, k.shape[1])
    per_head = per_head.relu_() if not per_head.requires_grad else F.relu(per_head)
    scores = weighted_over_heads(per_head, weights * scale)
    return scores.masked_fill_(~allowed, float("-inf")) if not scores.requires_grad \
        else scores.masked_fill(~allowed, float("-inf"))


def weighted_over_heads(per_head: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_j weights[..., j] · per_head[..., j, :]: per_head [B, S, H, K], weights [B, S, H] → [B, S, K].

    A product per query ([1, H] × [H, K]), except with gradient over few heads: there the product's backward is an
    outer product per query through a batched matmul, and a broadcast multiply and sum cost less. Forward +
    backward at glm5-tiny's 2 heads over 217 keys (32 sequences): 8 ms against 47; at 8 heads the product wins.
    """
    if per_head.requires_grad and per_head.shape[-2] <= ELEMENTWISE_HEAD_WEIGHTING:
        return (per_head * weights.unsqueeze(-1)).sum(dim=-2)
    return torch.matmul(weights.unsqueeze(-2), per_head).squeeze(-2)


def select_keys(q, k, weights, allowed, scale: float, topk: int, in_key_order: bool = True) -> torch.Tensor:
    """Each query's `stable_topk` keys [B, S, topk], scoring a chunk of queries at a time so that no
    [B, S, H, T] tensor ever exists.

    A chunk scores only the keys up to its last query: the rest are in every one of its queries' future (the
    last S keys are the S queries'). A query with fewer than `topk` visible keys then fills its selection with
    other masked keys than a full scoring would, which attention masks out all the same.
    """
    queries, keys = q.shape[1], k.shape[1]
    chunk = max(1, SELECTION_CHUNK_ELEMENTS // (q.shape[2] * keys))
    parts = []
    for start in range(0, queries, chunk):
        end = min(start + chunk, queries)
        seen = min(keys, max(keys - queries + end, topk))
        scores = key_scores(q[:, start:end], k[:, :seen], weights[:, start:end], allowed[:, start:end, :seen], scale)
        parts.append(stable_topk(scores, topk, in_key_order))
    return torch.cat(parts, dim=1)


def selected_scores(q, k, weights, allowed, scale: float, selected: torch.Tensor) -> torch.Tensor:
    """The indexer's scores of the selected keys only, [B, S, k] in `selected`'s order, -inf where not allowed."""
    batch, queries, topk = selected.shape
    keys = k.gather(1, selected.reshape(batch, -1, 1).expand(-1, -1, k.shape[-1])).view(batch, queries, topk, -1)
    per_head = F.relu(torch.einsum("bshd,bskd->bshk", q, keys) * scale)
    scores = weighted_over_heads(per_head, weights)
    return scores.masked_fill(~allowed.gather(-1, selected), float("-inf"))


def masks_selection(config, batch: int, queries: int, keys: int, topk: int) -> bool:
    """Whether a layer applies its selection as a mask over SDPA (`dsa_gather.masked_attention`) rather than
    gathering it: on a short sequence, never when decoding one token (expanding every cached key for a single
    query costs more than gathering); a chunk of queries after cached keys (model/shared_prompts.py) may. The
    indexer and the attention both ask it, with the attention's head count, so they agree."""
    return (queries == keys or queries > 1) and short_enough_to_mask(batch, queries, config.num_attention_heads,
                                                                      keys, topk)


def mla_projections(attention: GlmMoeDsaAttention, hidden_states: torch.Tensor, position_embeddings):
    """transformers' MLA projections of `GlmMoeDsaAttention.forward` up to the cache: (q_resid, q_nope, q_rope
    [B, H, S, ·], latent [B, 1, S, kv_lora_rank], k_rope [B, 1, S, rope]), rotary applied. The latents are what
    sparse-gather attends over; the bench's dense arm expands them as transformers does."""
    batch_size, seq_length = hidden_states.shape[:-1]
    q_resid = attention.q_a_layernorm(attention.q_a_proj(hidden_states))
    q_states = attention.q_b_proj(q_resid).view(batch_size, seq_length, -1, attention.qk_head_dim).transpose(1, 2)
    q_nope, q_rope = torch.split(q_states, [attention.qk_nope_head_dim, attention.qk_rope_head_dim], dim=-1)
    latent, k_rope = torch.split(attention.kv_a_proj_with_mqa(hidden_states),
                                 [attention.kv_lora_rank, attention.qk_rope_head_dim], dim=-1)
    latent = attention.kv_a_layernorm(latent).view(batch_size, 1, seq_length, attention.kv_lora_rank)
    k_rope = k_rope.view(batch_size, 1, seq_length, attention.qk_rope_head_dim)
    cos, sin = position_embeddings
    q_rope, k_rope = apply_rotary_pos_emb_interleave(q_rope, k_rope, cos, sin)
    return q_resid, q_nope, q_rope, latent, k_rope


class DsaAttention(GlmMoeDsaAttention):
    """`GlmMoeDsaAttention` that runs sparse-gather attention itself (model/dsa_gather.py) when the model's
    attention implementation is SPARSE_GATHER, and transformers' forward otherwise.

    transformers' attention functions see only the expanded per-head keys and values; sparse-gather works on
    MLA's latents, so this forward repeats transformers' projections up to the cache and the indexer.
    """

    def forward(self, hidden_states, position_embeddings, attention_mask, cache=None, position_ids=None,
                prev_topk_indices=None, **kwargs):
        if self.config._attn_implementation != SPARSE_GATHER:
            return super().forward(hidden_states, position_embeddings, attention_mask, cache=cache,
                                   position_ids=position_ids, prev_topk_indices=prev_topk_indices, **kwargs)
        batch_size, seq_length = hidden_states.shape[:-1]
        q_resid, q_nope, q_rope, latent, k_rope = mla_projections(self, hidden_states, position_embeddings)
        if cache is not None:
            latent, k_rope = cache.update(latent, k_rope, self.layer_idx, kwargs=kwargs)
        keys = latent.shape[2]
        # The indexer loss reads this layer's probabilities (as its target): computed only while it records.
        recording = self.indexer is not None and self.indexer.recording
        # Decoding (a KV cache holds keys before the queries): reading the cached latent rows as they are costs
        # less than expanding every cached key for the heads at each step, so decoding stays in latent space.
        decoding = seq_length < keys
        if keys <= self.config.index_topk and not recording:
            # No query sees more keys than the top-k: the selection is every key, and sparse attention is dense
            # attention exactly. Skip the indexer's scoring and the selection (only a cache keeps its keys).
            if self.indexer is not None and cache is not None:
                self.indexer.cache_keys(hidden_states, position_embeddings, cache)
            if decoding:
                output = latent_dense_attention(self, q_nope, q_rope, latent[:, 0], k_rope[:, 0], attention_mask)
            else:
                output, _ = masked_attention(self, q_nope, q_rope, latent, k_rope, attention_mask)
            every_key = torch.arange(keys, device=hidden_states.device, dtype=torch.int32)
            return self.o_proj(output), None, every_key.expand(batch_size, seq_length, keys)
        if self.indexer is not None:
            topk_indices = self.indexer(hidden_states, q_resid, position_embeddings, attention_mask[:, 0], position_ids,
                                        cache=cache)
        elif prev_topk_indices is None:
            raise ValueError("Shared DSA layers require top-k indices from a previous full indexer layer.")
        else:
            topk_indices = prev_topk_indices
        if masks_selection(self.config, batch_size, seq_length, keys, topk_indices.shape[-1]):
            output, probs = masked_attention(self, q_nope, q_rope, latent, k_rope, attention_mask,
                                             selected=topk_indices, probabilities=recording)
        else:
            output, probs = latent_sparse_attention(self, q_nope, q_rope, latent[:, 0], k_rope[:, 0], topk_indices,
                                                    attention_mask)
        return self.o_proj(output), probs, topk_indices


def install_dsa_indexers(model: nn.Module) -> list[DsaIndexer]:
    """Replace every layer's indexer by a `DsaIndexer`, in layer order, and make every attention a
    `DsaAttention`; installing twice changes nothing.

    The replacement takes over the stock indexer's submodules, so parameters keep their identity, dtype,
    device and `requires_grad` (an optimizer built earlier still holds the right tensors). An attention stays
    the same module with `DsaAttention`'s forward (it adds no state): its hooks (DeepSpeed's) stay too.
    """
    indexers = []
    for attention in [m for m in model.modules() if isinstance(m, GlmMoeDsaAttention)]:
        if attention.layer_idx >= attention.config.num_hidden_layers:
            continue  # the MTP layer's (model/mtp.py): it attends densely and its indexer never runs here
        attention.__class__ = DsaAttention
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
    dense evaluation).

    Sparse switches the model to sparse-gather attention; dense switches it back to SDPA from there (a caller
    that needs eager attention's probabilities sets eager afterwards). A model without DSA is left alone.
    """
    indexers = install_dsa_indexers(model)
    for indexer in indexers:
        indexer.dense, indexer.score_keys = dense, score_keys
    if not indexers:
        return
    # The outermost transformers model: `modules()` lists a module before its children.
    causal_lm = next(m for m in model.modules() if isinstance(m, PreTrainedModel))
    if not dense:
        causal_lm.set_attn_implementation(SPARSE_GATHER)
    elif causal_lm.config._attn_implementation == SPARSE_GATHER:
        causal_lm.set_attn_implementation("sdpa")


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
) -> torch.Tensor:
    """GLM-5 / DeepSeek-V3.2 indexer loss: KL(p ‖ softmax(I)), averaged over non-padding queries and layers.

    p is the layer's main attention (`attentions`, from `output_attentions=True` under eager or sparse-gather
    attention) summed over heads and L1-normalised per query, detached. `attention_mask` is the [B, S] padding
    mask the model got. Warm-up records run with dense attention over all causal keys; sparse records (the
    sparse phase) hold the selected keys' scores, and both distributions are renormalised over those keys.
    """
    if not records:
        raise ValueError("no indexer records: call the model inside `recording_indexer_scores`, loss after it")
    layer_losses = []
    for record in records:
        # Without eager attention transformers returns no probabilities (an empty tuple, or None per layer).
        if record.layer_idx >= len(attentions) or attentions[record.layer_idx] is None:
            raise ValueError("attention probabilities missing: use eager attention and output_attentions=True")
        if record.scores is None:
            raise ValueError("no indexer scores recorded: record with gradients on, or with the indexer trainable")
        target = attentions[record.layer_idx].detach().float().sum(dim=1)  # [B, S, keys]
        if record.sparse and target.shape[-1] != record.selected.shape[-1]:
            # Masked attention over every key (eager): the selected keys' probabilities, in `selected`'s order.
            # Sparse-gather attention returns exactly these already.
            target = target.gather(-1, record.selected)
        logits = record.scores
        valid = torch.ones(logits.shape[:2], dtype=torch.bool, device=logits.device) if attention_mask is None \
            else attention_mask.bool()
        # A padding query may see no key at all: before any softmax its row is made finite, and it is left out of
        # the mean (selecting the valid rows instead copied every row, and its backward scattered them back).
        padding = ~valid.unsqueeze(-1)
        target, logits = target.masked_fill(padding, 1.0), logits.masked_fill(padding, 0.0)
        target = target / target.sum(dim=-1, keepdim=True)
        log_q = torch.log_softmax(logits, dim=-1)
        # Keys without target mass add exactly 0, even where log_q is -inf (0 · -inf would be NaN).
        per_query = (torch.xlogy(target, target) - target * log_q.masked_fill(target == 0, 0)).sum(dim=-1)
        layer_losses.append((per_query * valid).sum() / valid.sum())
    return torch.stack(layer_losses).mean()
