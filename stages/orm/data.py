"""ORM training data: preference@1 rows as (chosen, rejected) pairs of rendered replies (model/reward_inputs.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from data_contracts.conversation import messages_from_records
from model.reward_inputs import collate_replies, reply_ids


@dataclass(frozen=True)
class PairSample:
    id: str
    domain: str
    chosen: list[int]  # `reply_ids` of each side
    rejected: list[int]

    @property
    def input_ids(self) -> list[int]:
        """The longer side, which is what a batch of pairs pads to (`GlobalBatches` groups by it)."""
        return max(self.chosen, self.rejected, key=len)


@dataclass
class PairSplit:
    pairs: list[PairSample]
    dropped_too_long: int


def render_pairs(rows: list[dict], tokenizer, max_len: int) -> PairSplit:
    pairs, dropped = [], 0
    for row in rows:
        prompt = messages_from_records(row["prompt"])
        chosen, rejected = (reply_ids(tokenizer, prompt, row[side]) for side in ("chosen", "rejected"))
        if max(len(chosen), len(rejected)) > max_len:
            dropped += 1
            continue
        pairs.append(PairSample(row["id"], row["domain"], chosen, rejected))
    return PairSplit(pairs, dropped)


def collate_pairs(pairs: Sequence[PairSample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chosen reply, then every rejected one, in one batch: the model's scores `.chunk(2)` apart."""
    return collate_replies([p.chosen for p in pairs] + [p.rejected for p in pairs], pad_id)
