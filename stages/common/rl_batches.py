"""Engine samples as a training batch, keeping the engine's exact token ids (TITO)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from model.routing import RoutingLayout
from rollout.client import Sample


@dataclass
class TrainBatch:
    """Right-padded prompt + response sequences; per-target tensors are aligned with input_ids[:, 1:]."""

    input_ids: torch.Tensor  # [N, L]
    attention_mask: torch.Tensor  # [N, L]
    response_mask: torch.Tensor  # [N, L-1]: 1 where the target is a generated token
    logp_infer: torch.Tensor  # [N, L-1]: the engine's logprob of that target
    # [N, L, MoE layers, top_k]: the experts the engine routed each position to (-1 where it routed none:
    # padding, a sequence's last token, a member no engine sampled); None where none were asked for.
    routed_experts: torch.Tensor | None = None
    prompt_lengths: torch.Tensor | None = None  # [N]: each row's prompt tokens, where the rows are prompt + response


    @property
    def response_tokens(self) -> int:
        return int(self.response_mask.sum())

    def rows(self, selected: slice) -> TrainBatch:
        """The `selected` rows, their padding trimmed to the longest of them."""
        width = int(self.attention_mask[selected].sum(dim=1).max())
        return TrainBatch(self.input_ids[selected, :width], self.attention_mask[selected, :width],
                          self.response_mask[selected, :width - 1], self.logp_infer[selected, :width - 1],
                          None if self.routed_experts is None else self.routed_experts[selected, :width],
                          None if self.prompt_lengths is None else self.prompt_lengths[selected])

    def to(self, device) -> TrainBatch:
        return TrainBatch(*(None if tensor is None else tensor.to(device) for tensor in
                            (self.input_ids, self.attention_mask, self.response_mask, self.logp_infer,
                             self.routed_experts, self.prompt_lengths)))


def train_batch(samples: Sequence[Sample], pad_id: int, routing: RoutingLayout | None = None) -> TrainBatch:
    """The sampled sequences exactly as the engine returned their ids, ready for the loss; with `routing`,
    the experts the engine routed each position to where it returned them."""
    return engine_batch([(s.prompt_ids, s.output_ids, [1] * len(s.output_ids), s.output_logprobs) for s in samples],
                        [s.routed_experts for s in samples], pad_id, routing)


def engine_batch(sequences: Sequence[tuple], payloads: Sequence[str | None], pad_id: int,
                 routing: RoutingLayout | None, replay: bool = False, what: str = "sample") -> TrainBatch:
    """`padded_batch(sequences)`; with `routing`, each row's engine experts from `payloads` (SGLang's, or None),
    which with `replay` every row must have."""
    batch = padded_batch(sequences, pad_id)
    if routing is None:
        return batch
    if replay:
        require_routed_experts(payloads, what)
    return with_routed_experts(batch, payloads, routing)


def with_routed_experts(batch: TrainBatch, payloads: Sequence[str | None], routing: RoutingLayout) -> TrainBatch:
    """`batch` with the experts the engine routed each row's positions to (SGLang's payload: every position of the
    row but its last), -1 where a row has none."""
    experts = torch.full((*batch.input_ids.shape, len(routing.moe_layers), routing.top_k), -1, dtype=torch.int32)
    lengths = batch.attention_mask.sum(dim=1).tolist()
    for row, payload in enumerate(payloads):
        if payload is not None:
            chosen = routing.routed_layers(payload)
            if len(chosen) != lengths[row] - 1:
                raise ValueError(f"row {row}: the engine routed {len(chosen)} positions of a sequence of "
                                 f"{lengths[row]} tokens (expected all but the last)")
            experts[row, :len(chosen)] = chosen
    return replace(batch, routed_experts=experts)


def require_routed_experts(payloads: Sequence[str | None], what: str = "sample") -> None:
    """routing_replay trains through the engine's experts: every sequence an engine drew must come with them."""
    missing = [index for index, payload in enumerate(payloads) if payload is None]
    if missing:
        raise ValueError(f"routing_replay: {what} {missing[0]} came back without its routed experts: the engine "
                         f"does not return them (SGLang serves them with --enable-return-routed-experts)")


def padded_batch(sequences: Sequence[tuple[list[int], list[int], list[int], list[float]]], pad_id: int) -> TrainBatch:
    """(prompt ids, response ids, response loss mask, response logprobs) rows → right-padded tensors.

    The response may hold environment tokens (mask 0) between the model's turns (agentic RL)."""
    width = max(len(prompt) + len(response) for prompt, response, _, _ in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    trained = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    logp_infer = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    for row, (prompt, response, mask, logprobs) in enumerate(sequences):
        if not len(logprobs) == len(mask) == len(response):
            raise ValueError(f"row {row}: {len(logprobs)} logprobs and {len(mask)} mask values for {len(response)} tokens")
        sequence = prompt + response
        ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        # Target position t predicts sequence[t + 1]: the response is targets len(prompt)-1 onwards.
        start, end = len(prompt) - 1, len(sequence) - 1
        trained[row, start:end] = torch.tensor(mask, dtype=torch.float32)
        logp_infer[row, start:end] = torch.tensor(logprobs)
    prompt_lengths = torch.tensor([len(prompt) for prompt, _, _, _ in sequences], dtype=torch.long)
    return TrainBatch(ids, attention, trained, logp_infer, prompt_lengths=prompt_lengths)


def response_values(row: torch.Tensor, prompt_length: int, response_length: int) -> list[float]:
    """A sample's per-target values (its row of a TrainBatch tensor such as logp_infer) at its response tokens."""
    start = prompt_length - 1
    return row[start:start + response_length].tolist()
