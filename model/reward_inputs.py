"""What a reward model reads: a prompt and one reply rendered as the conversation the policy would
produce, batched. The ORM's trainer and its reward module (rewards/orm.py) both come here, so training
and scoring render alike."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from model.renderer import render


def reply_ids(tokenizer, prompt: Sequence[dict], reply: str) -> list[int]:
    """The prompt, then an assistant turn holding only the visible reply, then its stop token: the
    ORM judges what the user reads, scored at that stop token."""
    messages = [*prompt, {"role": "assistant", "content": reply}]
    return render(tokenizer, messages, append_stop=True).input_ids


def collate_replies(replies: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch of `reply_ids` rows: (input_ids, attention_mask)."""
    rows = [torch.tensor(ids, dtype=torch.long) for ids in replies]
    input_ids = pad_sequence(rows, batch_first=True, padding_value=pad_id)
    attention_mask = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True, padding_value=0)
    return input_ids, attention_mask
