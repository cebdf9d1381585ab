"""SFT samples from committed chat@1 datasets: thinking modes mixed in, rendered, masked, length-checked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from data_contracts.conversation import messages_from_records
from model.renderer import render
from model.thinking import apply_thinking_mode, assign_modes
from stages.common.batches import TokenizedSample


@dataclass
class SplitSamples:
    samples: list[TokenizedSample] = field(default_factory=list)
    dropped_too_long: int = 0
    rows: int = 0
    modes: dict[str, int] = field(default_factory=dict)


def render_rows(rows: list[dict], tokenizer, mix: dict[str, float], seed: int, max_len: int) -> SplitSamples:
    result = SplitSamples(rows=len(rows))
    modes = assign_modes([row["id"] for row in rows], mix, seed)
    for row, mode in zip(rows, modes, strict=True):
        tools = json.loads(row["tools_json"]) if row["tools_json"] else None
        messages, kwargs = apply_thinking_mode(messages_from_records(row["messages"]), mode)
        sample = render(tokenizer, messages, tools, append_stop=True, **kwargs)
        result.modes[mode] = result.modes.get(mode, 0) + 1
        if len(sample.input_ids) > max_len:
            result.dropped_too_long += 1
            continue
        result.samples.append(TokenizedSample(sample.input_ids, sample.loss_mask))
    return result
