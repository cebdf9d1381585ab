"""The MTP layer (model/mtp.py) drafting for speculative decoding (rollout/engine/speculative.py), computed as the
engine's decoding step computes the model's layers (rollout/engine/decode_step.py): folded projections, attention
in MLA's latent space, few experts computed for every token. A draft token costs the layer and the LM head; on a
small model on a CPU it costs the count of its operations more than their arithmetic, so the layer runs the step's
operations rather than transformers' modules (about a third as many), up to float rounding
(tests/test_speculative.py checks it against the MTP layer's own forward).

The layer reads the model's hidden state at a position and the token after it, and predicts the token after that;
chained, its own output stands in for the model's hidden state. It attends densely over every earlier position: a
draft needs no exact rule (the model verifies it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.mtp import MTP_LAYERS, MtpConfigError, mtp_layer
from rollout.engine.columns import Columns
from rollout.engine.decode_step import feed_forward, fold_attention, latent_attention, project, rms


class DraftCache:
    """The MTP layer's keys over what a batch has decoded: latents [B, C, L], rotary keys [B, C, R] and which columns
    hold a real position (`visible` [B, C]), in `Columns` with room to spare. The first `length` columns are the
    verified positions'; a draft chain writes its own keys after them, and the next `extend` overwrites those."""

    def __init__(self, like_latent: torch.Tensor, like_k_rope: torch.Tensor, capacity: int):
        self.columns = Columns(capacity, latents=like_latent, k_ropes=like_k_rope,
                               visible=torch.ones_like(like_latent[..., 0], dtype=torch.bool))
        self.length = 0

    @property
    def latents(self) -> torch.Tensor:
        return self.columns["latents"]

    @property
    def k_ropes(self) -> torch.Tensor:
        return self.columns["k_ropes"]

    @property
    def visible(self) -> torch.Tensor:
        return self.columns["visible"]

    def write(self, start: int, latent: torch.Tensor, k_rope: torch.Tensor, visible: torch.Tensor) -> None:
        """Columns [start, start + S) from latent [B, S, L], k_rope [B, S, R], visible [B, S]."""
        self.columns.write(start, latents=latent, k_ropes=k_rope, visible=visible)

    def select(self, rows: torch.Tensor) -> None:
        self.columns.select(rows)


class Drafter:
    """The MTP layer of a served model (no gradient): `extend` appends positions whose model hidden state is known
    to the draft cache and returns their outputs; `chain` runs the layer from an output, a token at a time;
    `logits` the next-token logits of an output. `refresh` after every weight update, as the decoding step."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.layer = model, mtp_layer(model)
        if self.layer is None:
            raise MtpConfigError(f"speculative decoding drafts with the model's MTP layer; its config has no "
                                 f"{MTP_LAYERS}")
        self.embedding, self.head = model.get_input_embeddings().weight, model.lm_head.weight
        self.rotary = model.get_decoder().rotary_emb
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        self.folded = fold_attention(self.layer.self_attn, with_indexer=False)

    def logits(self, output: torch.Tensor) -> torch.Tensor:
        return F.linear(rms(output, self.layer.shared_head.norm), self.head)

    def extend(self, cache: DraftCache | None, hidden: torch.Tensor, next_tokens: torch.Tensor,
               positions: torch.Tensor, valid: torch.Tensor) -> tuple[DraftCache, torch.Tensor]:
        """Positions [B, S] whose model hidden state `hidden` [B, S, H] and following token `next_tokens` are
        known (`valid` [B, S]; the rest are holes no later query sees), at the rotary positions of those tokens:
        their keys appended to `cache` (a new one for None), their outputs [B, S, H] returned."""
        x, projected = self._inputs(hidden, next_tokens, positions)
        span = x.shape[1]
        if cache is None:
            cache = DraftCache(projected.latent, projected.k_rope, 2 * span)
        start = cache.length
        cache.write(start, projected.latent, projected.k_rope, valid)
        cache.length = end = start + span
        causal = torch.ones(span, end, dtype=torch.bool, device=x.device).tril(start)
        hidden_keys = ~(cache.visible[:, None, :end] & causal)  # [B, S, T]
        return cache, self._output(x, projected, cache, end, hidden_keys)

    def chain(self, cache: DraftCache, output: torch.Tensor, token: torch.Tensor, position: torch.Tensor,
              depth: int) -> torch.Tensor:
        """The chain's position `depth` (0 for the first after the verified ones): the layer's output `output`
        [B, H] as the hidden state before `token` [B] at `position` [B], attending over the cache and the chain's
        earlier positions. Returns its output [B, H]; its keys stay in the cache's spare columns."""
        x, projected = self._inputs(output[:, None], token[:, None], position[:, None])
        column = cache.length + depth
        cache.write(column, projected.latent, projected.k_rope, torch.ones_like(token, dtype=torch.bool)[:, None])
        return self._output(x, projected, cache, column + 1, ~cache.visible[:, None, :column + 1])[:, 0]

    def _inputs(self, hidden: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor):
        """The layer's input [B, S, H] from hidden states and the tokens after them [B, S], and its projections."""
        layer = self.layer
        embedded = rms(F.embedding(tokens, self.embedding), layer.enorm)
        x = F.linear(torch.cat([embedded, rms(hidden, layer.hnorm)], dim=-1), layer.eh_proj.weight)
        cos, sin = self.rotary(x, positions)
        return x, project(self.folded, layer.self_attn, rms(x, layer.input_layernorm), cos, sin)

    def _output(self, x: torch.Tensor, projected, cache: DraftCache, end: int, hidden_keys: torch.Tensor):
        folded, layer = self.folded, self.layer
        attended = latent_attention(folded, projected.q_latent, projected.q_rope, cache.latents[:, :end],
                                    cache.k_ropes[:, :end], hidden_keys, None)
        x = x + F.linear(attended, folded.o_proj, folded.o_bias)
        return x + feed_forward(layer.mlp, rms(x, layer.post_attention_layernorm))
