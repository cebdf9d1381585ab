"""Records in the formats people have, as rows of chat@1, prompt@1 or preference@1.

Conversations come as OpenAI-style `messages` (with `reasoning_content`, `tool_calls`, `tools`, and a
message's `error` and per-turn `thinking` flags kept), ShareGPT `conversations` (`from`/`value`), or
`prompt`/`completion`; preference pairs as `prompt`/`chosen`/`rejected`. Anything that does not fit
is a RowProblem naming the field; the importer adds the file and line.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
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
# A record's JSON text (a JSONL line): room for several messages at MAX_TEXT_CHARS, even \u-escaped, while a line
# with no end (a file of zeros) is refused before it is held in memory.
MAX_RECORD_BYTES = 16 * MAX_TEXT_CHARS
# Objects and arrays inside each other: a real record nests a handful deep (a tool's schema a few more); deeper is a
# broken or hostile file, and it would exhaust the parser's recursion here or json.dumps' later.
MAX_DEPTH = 64
MAX_ID_CHARS = 256  # an id names a row in splits, lineage and every message about it; it is not content


class RowProblem(ValueError):
    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field, self.detail = field, detail


def parse_json(text: str, field: str) -> Any:
    """`text` as a JSON value, refused as a RowProblem naming `field` when it is not JSON, when it writes NaN or
    Infinity (Python's parser takes them, JSON has no such numbers), or when it nests deeper than MAX_DEPTH."""
    def refuse(constant: str) -> None:
        raise RowProblem(field, f"{constant} is not valid JSON (a number must be finite)")

    try:
        value = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as error:
        raise RowProblem(field, f"is not JSON ({error.msg} at column {error.colno})") from None
    except RowProblem:
        raise
    except ValueError as error:  # an integer of more digits than Python converts (4,300 by default)
        raise RowProblem(field, f"holds a number too long to read ({str(error).split(':')[0]})") from None
    except RecursionError:  # the parser's own limit (about 1,000 levels) comes before the walk below
        raise RowProblem(field, f"nested deeper than {MAX_DEPTH} levels of objects and arrays") from None
    _check_parsed(value, field)
    return value


def _check_parsed(value: Any, field: str) -> None:
    """Nesting within MAX_DEPTH, and no lone surrogate (a `\\ud800` escape, valid JSON, has no UTF-8 to store)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                raise RowProblem(field, f"holds a lone surrogate {item[error.start]!a}, which is not text") from None
        elif isinstance(item, (dict, list)):
            if depth == MAX_DEPTH:
                raise RowProblem(field, f"nested deeper than {MAX_DEPTH} levels of objects and arrays")
            stack.extend((child, depth + 1) for child in ([*item, *item.values()] if isinstance(item, dict) else item))


def _json_text(value: Any, field: str) -> str:
    """`value` as the JSON text a row stores; a Parquet or `datasets` row can hold what JSON cannot write (NaN or
    Infinity in a float column, bytes, a timestamp), which would otherwise be stored as invalid JSON or fail unnamed."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise RowProblem(field, f"cannot be written as JSON ({error})") from None


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
        arguments = parse_json(arguments, f"{field}.arguments")
    if not isinstance(arguments, Mapping):
        raise RowProblem(f"{field}.arguments", "must be a JSON object")
    return {"name": name, "arguments_json": _json_text(arguments, f"{field}.arguments")}


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
    """The record's own id, or one made from its content when it has none (absent, null or blank)."""
    given = record.get("id")
    # A float id (1.0, or NaN: a Parquet integer column with a missing value becomes floats) is refused, not hashed
    # into another id; a bool is an int to Python but no id.
    if given is not None and (isinstance(given, bool) or not isinstance(given, (str, int))):
        raise RowProblem("id", f"must be a string or an integer, got {type(given).__name__}")
    if given is not None and str(given).strip():
        given = str(given)
        if len(given) > MAX_ID_CHARS:
            raise RowProblem("id", f"{len(given):,} characters; at most {MAX_ID_CHARS}")
        hidden = next((char for char in given if unicodedata.category(char) in ("Cc", "Cf", "Cs")), None)
        if hidden is not None:  # an escape sequence or a bidi override would act on the terminal showing the id
            raise RowProblem("id", f"holds the control or invisible character {hidden!a}; ids are printable text")
        return given
    return f"{prefix}-{hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]}"


def _domain(record: Mapping, suite: str) -> str:
    """The record's domain, or the dataset's name; a Parquet null or NaN is no domain called "None" or "nan"."""
    domain = record.get("domain")
    return suite if domain is None else _text(domain, "domain")


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
            "tools_json": _json_text(tools, "tools") if tools else None, "messages": messages}


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
    return {"id": _row_id(record, suite), "domain": _domain(record, suite), "source": suite,
            "messages": messages, "reference_answer": None if reference is None else _text(reference, "reference_answer"),
            "metadata_json": _json_text(metadata, "metadata")}


def to_preference(record: Mapping, suite: str) -> dict:
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    messages, _ = _conversation({"messages": prompt})
    chosen = _text(record.get("chosen"), "chosen", allow_empty=False)
    rejected = _text(record.get("rejected"), "rejected", allow_empty=False)
    if chosen == rejected:
        raise RowProblem("rejected", "equals chosen: a pair teaches nothing")
    return {"id": _row_id(record, suite), "domain": _domain(record, suite), "prompt": messages,
            "chosen": chosen, "rejected": rejected, "source": suite}


IMPORTERS: dict[str, tuple[Contract, Callable[[Mapping, str], dict]]] = {
    "chat": (CHAT_V1, to_chat), "prompt": (PROMPT_V1, to_prompt), "preference": (PREFERENCE_V1, to_preference),
}
