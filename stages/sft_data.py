"""SFT samples from committed chat@1 datasets: thinking modes mixed in, rendered, masked, length-checked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from data_contracts import CHAT_V1, read_parquet
from data_contracts.contract import Contract
from data_contracts.conversation import messages_from_records
from infra.store import CommittedArtifact
from model.renderer import render
from stages.batches import TokenizedSample
from model.thinking import apply_thinking_mode, assign_modes


@dataclass
class SplitSamples:
    samples: list[TokenizedSample] = field(default_factory=list)
    dropped_too_long: int = 0
    rows: int = 0
    modes: dict[str, int] = field(default_factory=dict)


def render_rows(rows: list[dict], tokenizer, mix: dict[str, float], seed: int, max_len: int) -> SplitSamples:
    result = SplitSamples(rows=len(rows))
    modes = assign_modes([row["id"] for row in rows], mix, seed)
    for row, mode in zip(rows, modes):
        tools = json.loads(row["tools_json"]) if row["tools_json"] else None
        messages, kwargs = apply_thinking_mode(messages_from_records(row["messages"]), mode)
        sample = render(tokenizer, messages, tools, append_stop=True, **kwargs)
        result.modes[mode] = result.modes.get(mode, 0) + 1
        if len(sample.input_ids) > max_len:
            result.dropped_too_long += 1
            continue
        result.samples.append(TokenizedSample(sample.input_ids, sample.loss_mask))
    return result


def load_split(datasets: list[CommittedArtifact], split: str, workdir: Path, contract: Contract = CHAT_V1) -> list[dict]:
    """All rows of `split` across the datasets, in dataset order (deterministic), checked against `contract`."""
    rows: list[dict] = []
    for index, dataset in enumerate(datasets):
        local = workdir / f"dataset-{index}"
        if not (local / f"{split}.parquet").exists():
            dataset.download(local)
        rows += read_parquet(contract, local / f"{split}.parquet").to_pylist()
    return rows
