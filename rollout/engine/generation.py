"""Batched token-in-token-out generation with a KV cache, returning the logprobs it sampled from.

The engine never sees text: prompts are token ids and so are completions (TITO), so a trainer
trains on exactly the tokens that were sampled. Logprobs are those of the distribution each token
was drawn from — softmax(logits / temperature), before top-p truncation (plain softmax when
greedy) — which is what a trainer recomputes at the same temperature. DSA attention is sparse, with
the indexer's tie-stable top-k, so a token's logprob is the same here as in a full re-forward.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model.device import inference_device, torch_dtype
from model.dsa import install_dsa_indexers, set_dense_attention
from model.logprobs import next_token_logprobs
from model.precision import Precision
from model.presets import load_model
from model.routing import RoutingCapture, moe_layers
from rollout.engine.decode_step import DecodeStep, covers
from rollout.engine.sampling import sample
from rollout.engine.speculative import Backlog, Rows, SpeculativeDecoder
from rollout.protocol import FinishReason, SamplingParams, UniformBatch


class PromptError(ValueError):
    """A prompt the engine cannot serve, by its position in the batch."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"input_ids[{index}]: {reason}")
        self.index, self.reason = index, reason


@dataclass(frozen=True)
class Completion:
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: FinishReason
    # None for the first token (nothing precedes it); only filled when the request asked for them.
    prompt_logprobs: list[float | None] | None = None
    # [positions run, num_hidden_layers, top_k] int32 (model/routing.py), when the request asked for them.
    routed_experts: np.ndarray | None = None
    # Speculative decoding's counts (SGLang's meta_info names): verification steps, drafts proposed and accepted.
    spec_verify_ct: int | None = None
    spec_num_proposed_drafts: int | None = None
    spec_num_correct_drafts: int | None = None


class Engine:
    """One model serving generate requests one batch at a time; weights can be swapped between them."""

    def __init__(self, checkpoint_dir: str | Path, *, seed: int = 0, weight_version: str = "0",
                 max_context: int | None = None, precision: Precision = "auto", speculative_steps: int = 0,
                 speculative_max_rows: int | None = None):
        self.seed, self.speculative_steps, self.speculative_max_rows = seed, speculative_steps, speculative_max_rows
        # On this process's GPU when there is one, else the CPU; in bf16 or fp32 as the trainer computes.
        self.device, self.dtype = inference_device(), torch_dtype(precision)
        self._requests = 0
        self._lock = threading.Lock()
        self._max_context_override = max_context
        self._load(checkpoint_dir, weight_version)

    def _load(self, checkpoint_dir: str | Path, weight_version: str) -> None:
        model = load_model(checkpoint_dir, dtype=self.dtype).to(self.device).eval()
        install_dsa_indexers(model)
        set_dense_attention(model, dense=False)  # served sparse, as trained last and as the trainer re-forwards
        eos = model.generation_config.eos_token_id
        self.model, self.checkpoint_dir, self.weight_version = model, str(checkpoint_dir), weight_version
        self.eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.pad_id = model.config.pad_token_id or 0
        self.max_context = self._max_context_override or model.config.max_position_embeddings
        self.routing, self.moe_layers = RoutingCapture(model), moe_layers(model)
        # Decoding steps run the engine's own step (rollout/engine/decode_step.py) where it covers the model.
        self.decode_step = DecodeStep(model) if covers(model) else None
        # With `speculative_steps`, the model's MTP layer drafts that many tokens per step (rollout/engine/speculative.py)
        # once at most `speculative_max_rows` rows of a batch decode.
        self.speculative = SpeculativeDecoder(model, self.speculative_steps, self.decode_step,
                                              self.speculative_max_rows) if self.speculative_steps else None

    def update_weights(self, checkpoint_dir: str | Path, weight_version: str | None = None) -> str:
        """Serve another checkpoint of the same architecture; returns the new weight version."""
        with self._lock:
            version = weight_version or self._next_version()
            self._load(checkpoint_dir, version)
            return version

    def _next_version(self) -> str:
        return str(int(self.weight_version) + 1 if self.weight_version.isdigit() else 1)

    def update_weights_in_place(self, receive: Callable[[dict[str, torch.Tensor]], None],
                                weight_version: str | None = None) -> str:
        """`receive` writes new values into the served tensors (by state-dict name) while no batch decodes;
        returns the new weight version."""
        with self._lock, torch.no_grad():
            try:
                receive(self.model.state_dict())
            finally:  # a push that failed part-way left some tensors new: decoding reads what the model holds
                if self.decode_step is not None:
                    self.decode_step.refresh()
                if self.speculative is not None:
                    self.speculative.refresh()
            self.weight_version = weight_version or self._next_version()
            return self.weight_version

    def generate(self, batch: UniformBatch) -> tuple[list[Completion], str]:
        """Completions for every prompt of the batch, and the weight version that produced them."""
        prompts = batch.prompts
        too_long = [(i, len(p)) for i, p in enumerate(prompts) if len(p) >= self.max_context]
        if too_long:
            index, length = too_long[0]
            raise PromptError(index, f"a prompt of {length} tokens leaves no room in the context of {self.max_context}")
        vocab = self.model.config.vocab_size
        bad = [(i, t) for i, p in enumerate(prompts) for t in p if not 0 <= t < vocab]
        if bad:
            raise PromptError(bad[0][0], f"token id {bad[0][1]} is outside the vocabulary (size {vocab})")
        with self._lock, torch.inference_mode():
            self._requests += 1
            seed = batch.sampling.sampling_seed
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self._requests if seed is None else seed)
            # The routers' choices are kept only for a batch that asks for them, and never past it.
            self.routing.recording = batch.return_routed_experts
            try:
                completions = self._generate(batch, generator)
            finally:
                self.routing.recording = False
            return completions, self.weight_version

    def _generate(self, batch: UniformBatch, generator: torch.Generator) -> list[Completion]:
        prompts, params = batch.prompts, batch.sampling
        ids, mask = (tensor.to(self.device) for tensor in left_padded(prompts, self.pad_id))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        want_prompt = batch.wants_prompt_logprobs()
        # A model without MoE layers routes nothing: no routed experts to return.
        routed = RoutedPositions(self, prompts) if batch.return_routed_experts and self.moe_layers else None
        out = self.model.get_decoder()(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        hidden, cache = out.last_hidden_state, out.past_key_values
        if routed is not None:
            routed.prefilled(ids.shape[1])
        logits = self.model.lm_head(hidden if want_prompt else hidden[:, -1:])
        prompt_logprobs = _prompt_logprobs(logits, ids, prompts, batch.logprob_start_len) if want_prompt else None
        rows = Rows(self._budgets(prompts, params), self._stops(params))
        # Speculation takes over from plain decoding once few enough rows decode; until then the draft's inputs
        # over every column wait in a backlog.
        backlog = None if self.speculative is None else Backlog(hidden, ids, positions, mask.bool())
        logits = logits[:, -1, :]
        # A decoding step's one query sees every key its row has (not the padding): the [B, 1, 1, T] mask
        # attention reads, kept here a column at a time, which transformers takes as it is instead of building
        # it from the padding mask at each step.
        visible = mask.bool()[:, None, None, :]
        positions = positions[:, -1:]
        # Batch rows still decoding, by prompt index. A row that finishes leaves the batch (and the KV
        # cache) at once, so short completions stop costing compute while long ones go on.
        active = list(range(len(prompts)))
        while True:
            running = [position for position, row in enumerate(active) if rows.finish[row] is None]
            if not running:
                break
            if len(running) < len(active):
                keep = torch.tensor(running, device=self.device)
                cache.batch_select_indices(keep)
                visible, positions, logits = visible[keep], positions[keep], logits[keep]
                if backlog is not None:
                    backlog.select(keep)
                active = [active[position] for position in running]
            tokens, token_logprobs = sample(logits.float(), params, generator)
            ended = [rows.take(row, token, logprob)
                     for row, token, logprob in zip(active, tokens.tolist(), token_logprobs.tolist(), strict=True)]
            if all(ended):
                break
            if backlog is not None and self.speculative.takes_over(ended.count(False)):
                self.speculative.resume(backlog, tokens, cache, params, generator, rows, active, routed)
                break
            visible = torch.cat([visible, torch.ones_like(visible[..., :1])], dim=-1)
            positions = positions + 1
            hidden = self.decode(tokens, positions, cache, visible)
            logits = self.model.lm_head(hidden)[:, -1, :]
            if backlog is not None:
                backlog.append(hidden, tokens[:, None], positions, visible[:, 0, 0, -1:])
            if routed is not None:
                routed.decoded(active)
        return [
            Completion(rows.outputs[i], rows.logprobs[i], rows.finish[i],
                       None if prompt_logprobs is None else prompt_logprobs[i],
                       None if routed is None else routed.of(i, len(rows.outputs[i]), batch.routed_from(i)),
                       *((rows.verify_steps[i], rows.drafted[i], rows.accepted[i]) if self.speculative else ()))
            for i in range(len(prompts))
        ]

    def _budgets(self, prompts: list[list[int]], params: SamplingParams) -> list[int]:
        """New tokens each prompt may take: the request's, within the context."""
        return [min(params.max_new_tokens, self.max_context - len(p)) for p in prompts]

    def _stops(self, params: SamplingParams) -> set[int]:
        return set(params.stop_token_ids) | (set() if params.ignore_eos else self.eos_ids)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, cache, visible: torch.Tensor) -> torch.Tensor:
        """The model's last hidden states [B, 1, H] after one token per row, its keys appended to `cache`."""
        if self.decode_step is not None:
            return self.decode_step.forward(tokens[:, None], positions, cache, ~visible[:, 0])
        return self.model.get_decoder()(input_ids=tokens[:, None], attention_mask=visible, position_ids=positions,
                                        past_key_values=cache, use_cache=True).last_hidden_state


class RoutedPositions:
    """The experts each prompt's positions were routed to over one `_generate`, gathered from the engine's
    routing capture after each forward: the prompt's own columns of the left-padded prefill, then one position
    per decoding step of the rows still in the batch (the positions that stood per verification step, speculating)."""

    def __init__(self, engine: Engine, prompts: list[list[int]]):
        self.engine, self.prompts = engine, prompts
        self.rows: list[list[torch.Tensor]] = [[] for _ in prompts]  # per prompt: [positions, moe layers, top_k]

    def prefilled(self, width: int) -> None:
        chosen = torch.stack(self.engine.routing.last(), dim=1)  # [rows × width, moe layers, top_k]
        chosen = chosen.view(len(self.prompts), width, *chosen.shape[1:])
        for row, prompt in enumerate(self.prompts):
            self.rows[row].append(chosen[row, width - len(prompt):])

    def decoded(self, active: list[int]) -> None:
        chosen = torch.stack(self.engine.routing.last(), dim=1)  # [active rows, moe layers, top_k]
        for position, row in enumerate(active):
            self.rows[row].append(chosen[position:position + 1])

    def verified(self, active: list[int], width: int, kept: list[int]) -> None:
        """After a speculative verification forward (rollout/engine/speculative.py)."""
        chosen = torch.stack(self.engine.routing.last(), dim=1)  # [active rows × width, moe layers, top_k]
        chosen = chosen.view(len(active), width, *chosen.shape[1:])
        for position, row in enumerate(active):
            self.rows[row].append(chosen[position, :kept[position]])

    def of(self, row: int, completion_tokens: int, start: int) -> np.ndarray:
        """SGLang's layout: every position run but the last sampled token's, all layers (zeros where a layer
        does not route), from `start` on. A row that finished still ran its last token in the step that
        finished it; that position is cut as SGLang never runs it."""
        chosen = torch.cat(self.rows[row])[:len(self.prompts[row]) + completion_tokens - 1]
        layers = self.engine.model.config.num_hidden_layers
        full = np.zeros((chosen.shape[0], layers, chosen.shape[-1]), dtype=np.int32)
        full[:, self.engine.moe_layers] = chosen.numpy()
        return full[min(start, len(full)):]


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left padding keeps every prompt's last token in the last column, where decoding continues."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def _prompt_logprobs(logits: torch.Tensor, ids: torch.Tensor, prompts: list[list[int]], start: int) -> list[list[float | None]]:
    """log p(prompt[t] | prompt[:t]) for every t (None at t = 0), from `start` on."""
    per_position = next_token_logprobs(logits, ids)
    width = ids.shape[1]
    result = []
    for row, prompt in enumerate(prompts):
        values = per_position[row, width - len(prompt):].tolist()  # predictions of prompt[1:]
        result.append(([None] + values)[max(start, 0):])
    return result
