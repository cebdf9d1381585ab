"""Messages → (token ids, loss mask) in GLM-5's chat format.

The text is exactly what model/chat_template.jinja renders (tests hold the two together); here it is
built as segments that each know whether the model is trained on them, then tokenized once as a
whole and the mask read off the token offsets. Segment edges always sit next to a special token,
which the tokenizer splits on first, so no token straddles two segments.

Mask rules (SPEC.md): trained are the reasoning text, the `</think>` that closes it, the reply, the
tool calls and the role token that closes the assistant turn (the learned stop). Never trained:
`<|assistant|>`, the opening `<think>` (both belong to the generation prompt), a bare `</think>` of a
turn without reasoning (the thinking-off generation prompt ends with it), system/user/tool text,
and every token of a message flagged `error`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from model import special_tokens as st

TOOLS_PREAMBLE = (
    "\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_POSTAMBLE = (
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
)


class RenderError(ValueError):
    """A conversation the chat format cannot express; names the message index."""


@dataclass
class RenderedSample:
    text: str
    input_ids: list[int]
    loss_mask: list[int]
    segments: list[tuple[str, bool]] = field(repr=False)

    def trained_text(self) -> str:
        return "".join(text for text, trained in self.segments if trained)


def text_of(content: object) -> str:
    """Flatten content the way the template does: strings, or lists of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    return str(content)


def split_reasoning(message: Mapping) -> tuple[str, str]:
    """(reasoning, reply): from `reasoning_content`, else from a `<think>…</think>` inside content."""
    reply = text_of(message.get("content"))
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        return reasoning, reply
    if st.THINK_CLOSE in reply:
        head, tail = reply.split(st.THINK_CLOSE)[0], reply.split(st.THINK_CLOSE)[-1]
        return head.rstrip("\n").split(st.THINK_OPEN)[-1].lstrip("\n"), tail.lstrip("\n")
    return "", reply


def tool_call_text(call: Mapping) -> str:
    function = call.get("function") or call
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    pieces = [st.TOOL_CALL_OPEN, function["name"]]
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        pieces += [st.ARG_KEY_OPEN, key, st.ARG_KEY_CLOSE, st.ARG_VALUE_OPEN, rendered, st.ARG_VALUE_CLOSE]
    pieces.append(st.TOOL_CALL_CLOSE)
    return "".join(pieces)


def tools_text(tools: Sequence[Mapping]) -> str:
    specs = "".join(json.dumps(tool, ensure_ascii=False) + "\n" for tool in tools)
    return st.SYSTEM + TOOLS_PREAMBLE + specs + TOOLS_POSTAMBLE


ROLE_TOKENS = {"system": st.SYSTEM, "user": st.USER, "assistant": st.ASSISTANT, "tool": st.OBSERVATION}


def build_segments(
    messages: Sequence[Mapping],
    tools: Sequence[Mapping] | None = None,
    *,
    clear_thinking: bool = True,
    enable_thinking: bool = True,
    add_generation_prompt: bool = False,
    append_stop: bool = False,
) -> list[tuple[str, bool]]:
    """The rendered conversation as (text, trained) pieces; see the module docstring for the rules."""
    segments: list[tuple[str, bool]] = [(st.GMASK + st.SOP, False)]
    if tools:
        segments.append((tools_text(tools), False))
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    after_trained_turn = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ROLE_TOKENS:
            raise RenderError(f"message {index}: unknown role {role!r} (expected system, user, assistant or tool)")
        continues_observation = role == "tool" and index > 0 and messages[index - 1].get("role") == "tool"
        if not continues_observation:
            # The role token after a trained assistant turn is its learned stop.
            segments.append((ROLE_TOKENS[role], after_trained_turn and role != "assistant"))
        after_trained_turn = False
        if role in ("system", "user"):
            segments.append((text_of(message.get("content")), False))
        elif role == "tool":
            response = st.TOOL_RESPONSE_OPEN + text_of(message.get("content")) + st.TOOL_RESPONSE_CLOSE
            segments.append((response, False))
        else:
            trained = not message.get("error", False)
            reasoning, reply = split_reasoning(message)
            if reasoning and (not clear_thinking or index > last_user):
                segments += [(st.THINK_OPEN, False), (reasoning.strip() + st.THINK_CLOSE, trained)]
            else:
                segments.append((st.THINK_CLOSE, False))
            calls = "".join(tool_call_text(call) for call in message.get("tool_calls") or [])
            segments.append((reply.strip() + calls, trained))
            after_trained_turn = trained
    if add_generation_prompt:
        segments.append((st.ASSISTANT + (st.THINK_OPEN if enable_thinking else st.THINK_CLOSE), False))
    elif append_stop and after_trained_turn:
        segments.append((st.OBSERVATION if messages[-1].get("tool_calls") else st.USER, True))
    return [(text, trained) for text, trained in segments if text]


def render(tokenizer, messages: Sequence[Mapping], tools: Sequence[Mapping] | None = None, **kwargs) -> RenderedSample:
    """Token ids and loss mask for one conversation (kwargs as in `build_segments`)."""
    segments = build_segments(messages, tools, **kwargs)
    text = "".join(piece for piece, _ in segments)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    boundaries, flags, position = [], [], 0
    for piece, trained in segments:
        position += len(piece)
        boundaries.append(position)
        flags.append(trained)
    mask, segment = [], 0
    for start, end in encoding["offset_mapping"]:
        while boundaries[segment] <= start:
            segment += 1
        if end > boundaries[segment]:
            raise RenderError(f"a token spans two mask segments at character {start} of {text[start:end]!r}")
        mask.append(1 if flags[segment] else 0)
    return RenderedSample(text, list(encoding["input_ids"]), mask, segments)
