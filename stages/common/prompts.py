"""What a dataset row asks and expects (a chat@1 row: the conversation before its first reply, its tools,
the answer its reference reply states), and RL prompts: that conversation rendered as the token ids the
engine is given (TITO), with what reward modules read besides it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from data_contracts import CHAT_V1, PROMPT_V1
from data_contracts.contract import Contract
from data_contracts.conversation import messages_from_records
from infra.publish import published_contract
from infra.store import CommittedArtifact
from rollout.agents.trajectory import prompt_ids
from suites.answers import stated_answer


def prompt_messages(row: Mapping) -> tuple[dict, ...]:
    messages = messages_from_records(row["messages"])
    first_reply = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    return tuple(messages[:first_reply])


def row_tools(row: Mapping) -> list[dict] | None:
    return json.loads(row["tools_json"]) if row.get("tools_json") else None


def stated_reference(row: Mapping) -> str | None:
    """The answer the row's last assistant reply states, None where it states none."""
    replies = [m for m in row["messages"] if m["role"] == "assistant"]
    return stated_answer(replies[-1]["content"]) if replies else None


def reference_answer(row: Mapping) -> str:
    """The answer the row's last assistant reply states; a row without one cannot be scored."""
    answer = stated_reference(row)
    if answer is None:
        raise ValueError(f"row {row['id']}: no reference reply of the form 'The answer is X.'")
    return answer


@dataclass(frozen=True)
class RlPrompt:
    id: str
    messages: tuple[dict, ...]
    reference: str | None
    prompt_ids: list[int]
    metadata: Mapping = field(default_factory=dict)  # what reward modules read besides the reference (domain, rules)


ReadReference = Callable[[Mapping], str | None]


def rl_prompts(rows: Sequence[Mapping], tokenizer, reference: ReadReference = reference_answer) -> list[RlPrompt]:
    """Each row's conversation up to its first reply, rendered with thinking on, as token ids, with the answer
    `reference` reads from it: a verifier needs one (reference_answer refuses a row without), a teacher that
    scores the reply itself does not (stated_reference: SFT's conversations state no answer)."""
    prompts = []
    for row in rows:
        messages = prompt_messages(row)
        ids = prompt_ids(tokenizer, list(messages), row_tools(row))
        prompts.append(RlPrompt(row["id"], messages, reference(row), ids))
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


def prompt_contract(dataset: CommittedArtifact) -> Contract:
    """How a dataset's rows are read as prompts: prompt@1 as published, anything else as chat@1."""
    return PROMPT_V1 if published_contract(dataset) == PROMPT_V1.id else CHAT_V1


def parse_prompts(rows: Sequence[Mapping], contract: Contract, tokenizer,
                  reference: ReadReference = reference_answer) -> list[RlPrompt]:
    """prompt@1 rows with their reference answer and metadata; chat@1 rows up to their first reply, with the
    answer `reference` reads (rl_prompts)."""
    return general_prompts(rows, tokenizer) if contract is PROMPT_V1 else rl_prompts(rows, tokenizer, reference)
