"""RL prompts: a dataset row's conversation up to its first reply, rendered as the token ids the engine
is given (TITO), with what reward modules read besides it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from data_contracts.conversation import messages_from_records
from rollout.trajectory import prompt_ids
from stages.common.chat_rows import prompt_messages, reference_answer, row_tools


@dataclass(frozen=True)
class RlPrompt:
    id: str
    messages: tuple[dict, ...]
    reference: str | None
    prompt_ids: list[int]
    metadata: Mapping = field(default_factory=dict)  # what reward modules read besides the reference (domain, rules)


def rl_prompts(rows: Sequence[Mapping], tokenizer) -> list[RlPrompt]:
    """Each row's conversation up to its first reply, rendered with thinking on, as token ids."""
    prompts = []
    for row in rows:
        messages = prompt_messages(row)
        ids = prompt_ids(tokenizer, list(messages), row_tools(row))
        prompts.append(RlPrompt(row["id"], messages, reference_answer(row), ids))
    return prompts


def general_prompts(rows: Sequence[Mapping], tokenizer) -> list[RlPrompt]:
    """prompt@1 rows as RL prompts, rendered with thinking on; metadata carries the domain and the rules."""
    prompts = []
    for row in rows:
        messages = tuple(messages_from_records(row["messages"]))
        metadata = {"domain": row["domain"], **json.loads(row["metadata_json"] or "{}")}
        prompts.append(RlPrompt(row["id"], messages, row["reference_answer"],
                                prompt_ids(tokenizer, list(messages), None), metadata))
    return prompts
