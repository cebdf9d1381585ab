"""Parse what a model generated for one assistant turn: reasoning, reply and tool calls.

The text is everything after the generation prompt. With thinking on the prompt ends with `<think>`,
so the text begins inside the reasoning and `</think>` closes it; with thinking off the prompt ends
with `</think>` and the text is the reply. A model that opens `<think>` itself is parsed the same
way, so a caller can see that a thinking-off turn reasoned anyway.

A turn is `[<think>]reasoning</think>` (optional), then the reply, then zero or more
`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`, then optionally the
stop token that ended generation. Anything else — an unclosed tag, a call without a name, a key
without a value, text after the calls, a tag where the format has none — makes the turn malformed:
executing a half-parsed call would act on something the model never finished saying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from model import special_tokens as st


@dataclass(frozen=True)
class ToolCall:
    name: str
    # Values are the text the model wrote: the format does not mark types (the renderer writes
    # strings raw and everything else as JSON), so only the tool's own schema can decode them.
    arguments: dict[str, str]

    def as_message_call(self) -> dict:
        """The call as an assistant message's `tool_calls` entry, which the renderer renders back."""
        return {"name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class ParsedTurn:
    # None when no `</think>` was generated; "" when the reasoning was empty.
    reasoning: str | None
    reply: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    well_formed: bool = True
    problem: str | None = None
    # The stop token the text ended with; None means generation was cut off before stopping.
    stop: str | None = None


class _Malformed(ValueError):
    pass


# Tags a model never writes inside its own turn: results come from the environment, and the other
# control tokens belong to the prompt (the three stop tokens are handled before this is consulted).
_FOREIGN_TOKENS = tuple(
    token for token in (*st.CONTROL_TOKENS, st.TOOL_RESPONSE_OPEN, st.TOOL_RESPONSE_CLOSE)
    if token not in st.STOP_TOKENS
)
# Longest first, so that no tag is matched as a prefix of a longer one.
_ANY_TAG = re.compile("(" + "|".join(re.escape(t) for t in sorted(st.ALL_SPECIAL_TOKENS, key=len, reverse=True)) + ")")


def parse_assistant_output(text: str) -> ParsedTurn:
    """Split one generated assistant turn; see the module docstring for the grammar."""
    body, stop = _strip_stop(text)
    reasoning, rest = None, body
    if st.THINK_CLOSE in body:
        head, rest = body.split(st.THINK_CLOSE, 1)
        reasoning = head.removeprefix(st.THINK_OPEN).strip()
    reply, _, calls_text = rest.partition(st.TOOL_CALL_OPEN)
    try:
        _refuse_tags(reasoning or "")
        _refuse_tags(reply)
        tool_calls = _parse_calls(st.TOOL_CALL_OPEN + calls_text) if st.TOOL_CALL_OPEN in rest else []
    except _Malformed as error:
        return ParsedTurn(reasoning, reply.strip(), [], well_formed=False, problem=str(error), stop=stop)
    return ParsedTurn(reasoning, reply.strip(), tool_calls, stop=stop)


def _strip_stop(text: str) -> tuple[str, str | None]:
    for token in st.STOP_TOKENS:
        if text.endswith(token):
            return text[: -len(token)], token
    return text, None


def _refuse_tags(text: str) -> None:
    """Reasoning and reply are plain text: any tag in them is misplaced."""
    misplaced = _ANY_TAG.search(text)
    if misplaced:
        raise _Malformed(_unexpected(misplaced.group()))


def _unexpected(tag: str) -> str:
    if tag in _FOREIGN_TOKENS:
        return f"{tag} does not belong in a generated assistant turn"
    if tag in (st.THINK_OPEN, st.THINK_CLOSE):
        return f"stray {tag} (reasoning opens at most once, at the start, and closes once)"
    if tag in st.STOP_TOKENS:
        return f"{tag} before the end of the turn"
    return f"{tag} outside a tool call"


def _parse_calls(text: str) -> list[ToolCall]:
    """`text` starts at the first `<tool_call>`; whitespace may separate calls, nothing else."""
    pieces = [piece for piece in _ANY_TAG.split(text) if piece]
    calls, position = [], 0
    while position < len(pieces):
        piece = pieces[position]
        if piece == st.TOOL_CALL_OPEN:
            call, position = _parse_call(pieces, position + 1)
            calls.append(call)
        elif piece.strip():
            raise _Malformed(
                _unexpected(piece) if _ANY_TAG.fullmatch(piece) else f"text after the tool calls: {piece.strip()!r}"
            )
        else:
            position += 1
    return calls


def _parse_call(pieces: list[str], position: int) -> tuple[ToolCall, int]:
    """One call whose `<tool_call>` precedes pieces[position]; returns it and the position after it."""
    name = ""
    if position < len(pieces) and not _ANY_TAG.fullmatch(pieces[position]):
        name, position = pieces[position].strip(), position + 1
    if not name:
        raise _Malformed("a tool call without a function name")
    arguments: dict[str, str] = {}
    while True:
        if position >= len(pieces):
            raise _Malformed(f"unclosed {st.TOOL_CALL_OPEN} for {name!r}")
        piece = pieces[position]
        if piece == st.TOOL_CALL_CLOSE:
            return ToolCall(name, arguments), position + 1
        if piece == st.ARG_KEY_OPEN:
            key, position = _enclosed(pieces, position + 1, st.ARG_KEY_CLOSE, f"an argument key of {name!r}")
            key = key.strip()
            if not key:
                raise _Malformed(f"an empty argument key in {name!r}")
            position = _skip_blank(pieces, position)
            if position >= len(pieces) or pieces[position] != st.ARG_VALUE_OPEN:
                raise _Malformed(f"argument {key!r} of {name!r} has no value")
            value, position = _enclosed(pieces, position + 1, st.ARG_VALUE_CLOSE, f"the value of {key!r}")
            if key in arguments:
                raise _Malformed(f"argument {key!r} of {name!r} given twice")
            arguments[key] = value
        elif piece.strip():
            raise _Malformed(f"unexpected {piece.strip()!r} inside the tool call {name!r}")
        else:
            position += 1


def _enclosed(pieces: list[str], position: int, closing: str, what: str) -> tuple[str, int]:
    """The text up to `closing` (which may be empty); any other tag first means `what` was left open."""
    text = ""
    if position < len(pieces) and not _ANY_TAG.fullmatch(pieces[position]):
        text, position = pieces[position], position + 1
    if position >= len(pieces) or pieces[position] != closing:
        raise _Malformed(f"{what} left open (expected {closing})")
    return text, position + 1


def _skip_blank(pieces: list[str], position: int) -> int:
    while position < len(pieces) and not _ANY_TAG.fullmatch(pieces[position]) and not pieces[position].strip():
        position += 1
    return position
