"""A person's own chat@1 data held out: each test conversation's first question asked (thinking on),
the model's reply scored against the reference reply.

`format_validity` is the share of turns that parse (closed reasoning, a stop token); `reply_match`
the share whose reply is the reference reply, ignoring surrounding space. The embedded suites have
their own evaluators (stages/evaluation/evaluate.py); this one knows nothing of what the data asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from model.turns import score_turn
from stages.common.prompts import prompt_messages, row_tools
from stages.evaluation.prompts import GenerateTurns, Prompt


def reference_reply(row: Mapping) -> str:
    return next(m["content"] for m in row["messages"] if m["role"] == "assistant")


def evaluate_replies(rows: Sequence[Mapping], generate: GenerateTurns, *, batch_size: int,
                     advance: Callable[[int], None] = lambda _: None) -> dict[str, float]:
    valid = matched = 0
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        texts = generate([Prompt(prompt_messages(row), row_tools(row), True) for row in batch])
        for row, text in zip(batch, texts, strict=True):
            turn = score_turn(text, thinking=True)
            valid += turn.format_valid
            matched += turn.format_valid and turn.parsed.reply.strip() == reference_reply(row).strip()
        advance(len(batch))
    count = max(1, len(rows))
    return {"format_validity": valid / count, "reply_match": matched / count}
