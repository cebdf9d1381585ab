"""Records in the formats people have, as rows of chat@1, prompt@1 or preference@1.

Conversations come as OpenAI-style `messages` (with `reasoning_content`, `tool_calls`, `tools`, and a
message's `error` and per-turn `thinking` flags kept), ShareGPT `conversations` (`from`/`value`), or
`prompt`/`completion`; preference pairs as `prompt`/`chosen`/`rejected`. Anything that does not fit
is a RowProblem naming the field; the importer adds the file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from data_contracts.chat import CHAT_V1, THINKING_MODES
from data_contracts.contract import Contract
from data_contracts.preference import PREFERENCE_V1
from data_contracts.prompt import PROMPT_V1

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "tool": "tool", "observation": "tool", "function_response": "tool"}
MAX_TEXT_CHARS = 1_000_000  # a message past this is a broken export, not a conversation


class RowProblem(ValueError):
    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field, self.detail = field, detail


def _text(value: Any, field: str, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise RowProblem(field, f"must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise RowProblem(field, f"{len(value):,} characters; at most {MAX_TEXT_CHARS:,}")
    if not allow_empty and not value.strip():
        raise RowProblem(field, "is empty")
    return value


def _tool_call(call: Any, field: str) -> dict:
    if not isinstance(call, Mapping):
        raise RowProblem(field, "must be an object with a name and arguments")
    function = call.get("function", call)  # OpenAI nests {"type": "function", "function": {...}}
    name = _text(function.get("name"), f"{field}.name", allow_empty=False)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise RowProblem(f"{field}.arguments", f"is not JSON ({error.msg})") from None
    if not isinstance(arguments, Mapping):
        raise RowProblem(f"{field}.arguments", "must be a JSON object")
    return {"name": name, "arguments_json": json.dumps(arguments, ensure_ascii=False)}


def _message(raw: Any, field: str) -> dict:
    if not isinstance(raw, Mapping):
        raise RowProblem(field, "must be an object with a role and content")
    role = raw.get("role")
    if role not in ROLES:
        raise RowProblem(f"{field}.role", f"{role!r} is not one of {', '.join(ROLES)}")
    calls = raw.get("tool_calls") or None
    if calls is not None and (role != "assistant" or not isinstance(calls, list)):
        raise RowProblem(f"{field}.tool_calls", "only an assistant message has tool calls, as a list")
    reasoning = raw.get("reasoning_content")
    thinking = raw.get("thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise RowProblem(f"{field}.thinking", "must be true, false or absent")
    if not isinstance(raw.get("error", False), bool):
        raise RowProblem(f"{field}.error", "must be true or false")
    return {
        "role": role, "content": _text(raw.get("content") if raw.get("content") is not None else "", f"{field}.content"),
        "reasoning_content": None if reasoning is None else _text(reasoning, f"{field}.reasoning_content"),
        "tool_calls": None if calls is None else [_tool_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(calls)],
        "error": raw.get("error", False), "thinking": thinking,
    }


def _conversation(record: Mapping) -> tuple[list[dict], str]:
    """The messages and the field they came from."""
    if "messages" in record:
        raw, field = record["messages"], "messages"
    elif "conversations" in record:
        raw, field = _from_sharegpt(record["conversations"]), "conversations"
    elif "prompt" in record and "completion" in record:
        raw = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
        field = "prompt"
    else:
        raise RowProblem("messages", "no `messages`, `conversations` or `prompt`/`completion` field")
    if not isinstance(raw, list) or not raw:
        raise RowProblem(field, "must be a non-empty list of messages")
    messages = [_message(m, f"{field}[{i}]") for i, m in enumerate(raw)]
    _check_turns(messages, field)
    return messages, field


def _from_sharegpt(turns: Any) -> Any:
    if not isinstance(turns, list):
        return turns
    converted = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or turn.get("from") not in SHAREGPT_ROLES:
            who = turn.get("from") if isinstance(turn, Mapping) else turn
            raise RowProblem(f"conversations[{i}].from", f"{who!r} is not one of {', '.join(SHAREGPT_ROLES)}")
        converted.append({"role": SHAREGPT_ROLES[turn["from"]], "content": turn.get("value")})
    return converted


def _check_turns(messages: list[dict], field: str) -> None:
    for i, message in enumerate(messages):
        if message["role"] == "tool" and (i == 0 or messages[i - 1]["role"] not in ("assistant", "tool")):
            raise RowProblem(f"{field}[{i}].role", "a tool result must follow an assistant turn or another result")
        if message["tool_calls"] and (i + 1 == len(messages) or messages[i + 1]["role"] != "tool"):
            raise RowProblem(f"{field}[{i}].tool_calls", "a tool call must be followed by its tool result")


def _row_id(record: Mapping, prefix: str) -> str:
    if isinstance(record.get("id"), (str, int)) and str(record["id"]).strip():
        return str(record["id"])
    return f"{prefix}-{hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]}"


def to_chat(record: Mapping, suite: str) -> dict:
    messages, field = _conversation(record)
    if not any(m["role"] == "assistant" for m in messages):
        raise RowProblem(field, "has no assistant turn to train on")
    tools = record.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RowProblem("tools", "must be a list of tool specs")
    mode = record.get("thinking_mode", "interleaved")
    if mode not in THINKING_MODES:
        raise RowProblem("thinking_mode", f"{mode!r} is not one of {', '.join(THINKING_MODES)}")
    return {"id": _row_id(record, suite), "suite": suite, "split": "", "thinking_mode": mode,
            "tools_json": json.dumps(tools, ensure_ascii=False) if tools else None, "messages": messages}


def to_prompt(record: Mapping, suite: str) -> dict:
    if isinstance(record.get("prompt"), str) and "completion" not in record:
        record = {**record, "messages": [{"role": "user", "content": record["prompt"]}]}
    messages, field = _conversation(record)
    if messages[-1]["role"] == "assistant":
        raise RowProblem(f"{field}[{len(messages) - 1}].role", "a prompt ends in a user turn, not an assistant one")
    reference = record.get("reference_answer", record.get("answer"))
    metadata = record.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise RowProblem("metadata", "must be an object")
    return {"id": _row_id(record, suite), "domain": str(record.get("domain", suite)), "source": suite,
            "messages": messages, "reference_answer": None if reference is None else _text(reference, "reference_answer"),
            "metadata_json": json.dumps(metadata, ensure_ascii=False)}


def to_preference(record: Mapping, suite: str) -> dict:
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    messages, _ = _conversation({"messages": prompt})
    chosen = _text(record.get("chosen"), "chosen", allow_empty=False)
    rejected = _text(record.get("rejected"), "rejected", allow_empty=False)
    if chosen == rejected:
        raise RowProblem("rejected", "equals chosen: a pair teaches nothing")
    return {"id": _row_id(record, suite), "domain": str(record.get("domain", suite)), "prompt": messages,
            "chosen": chosen, "rejected": rejected, "source": suite}


IMPORTERS: dict[str, tuple[Contract, Callable[[Mapping, str], dict]]] = {
    "chat": (CHAT_V1, to_chat), "prompt": (PROMPT_V1, to_prompt), "preference": (PREFERENCE_V1, to_preference),
}
