"""How `posttrain rollouts` shows what a stage trained on: its recorded samples, decoded with the checkpoint's
own tokenizer, with their rewards and advantages."""

from __future__ import annotations

import tempfile

from rich.table import Table

from infra.rollouts import recorded_shards
from infra.store import CommittedArtifact
from model.readable import readable
from model.tokenizer import load_tokenizer

# The checkpoint's weights and resume state are not needed to decode.
NOT_THE_TOKENIZER = ("deepspeed/", "model", "metrics.jsonl", "trainer_state.json")
SHOWN_CHARS = 300


def decoded_samples(checkpoint: CommittedArtifact, step: int | None, limit: int, for_reader: bool = False) -> list[dict]:
    """Up to `limit` recorded samples (of `step` only, if given) in step order, each with its `prompt` and
    `completion` decoded: with every special token kept (the format is part of what was rewarded), or `for_reader`
    as a person reads them (model/readable.py)."""
    rows = []
    for shard in recorded_shards(checkpoint):
        if step is not None and shard.step != step:
            continue
        rows += shard.table().slice(0, limit - len(rows)).to_pylist()
        if len(rows) >= limit:
            break
    if not rows:
        return []
    with tempfile.TemporaryDirectory(prefix="posttrain-tokenizer-") as scratch:
        tokenizer = load_tokenizer(checkpoint.download(scratch, skip=NOT_THE_TOKENIZER))
    def decode(ids: list[int]) -> str:
        return readable(tokenizer, ids) if for_reader else tokenizer.decode(ids, skip_special_tokens=False)

    return [{"prompt": decode(row["prompt_ids"]), "completion": decode(row["response_ids"]), **row} for row in rows]


def samples_table(samples: list[dict]) -> Table:
    table = Table(show_lines=True)
    for column in ("step", "task", "group", "reward", "advantage", "prompt (end)", "completion"):
        table.add_column(column, overflow="fold")
    for sample in samples:
        scores = ", ".join(f"{s['module']} {_number(s['score'])}" for s in sample["reward_scores"] or [])
        table.add_row(str(sample["step"]), sample["task"], sample["group_id"].rsplit("/", 2)[-1],
                      _number(sample["reward"]) + (f"\n({scores})" if scores else ""), _number(sample["advantage"]),
                      sample["prompt"][-SHOWN_CHARS:], sample["completion"][:SHOWN_CHARS])
    return table


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
