"""A model's tool use in the suites' form: checking a call against the tool list it was given (with an error the
model can read and act on), and writing the turns of a reference trajectory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from model.tool_calls import ToolCall


def argument_error(call: ToolCall, tools: Sequence[Mapping]) -> str | None:
    """Why `call` does not fit `tools` (an unknown tool, or other arguments than the tool's), or None when it fits."""
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    if call.name not in schemas:
        return f"Error: unknown tool '{call.name}'; the tools are {', '.join(schemas)}."
    expected = list(schemas[call.name].get("properties", {}))
    if sorted(call.arguments) == sorted(expected):
        return None
    if not expected:
        return f"Error: {call.name} takes no arguments."
    return f"Error: {call.name} takes exactly the arguments {', '.join(repr(name) for name in expected)}."


def call_turns(reasoning: str, call: ToolCall, result: str, error: bool = False) -> list[dict]:
    """An assistant turn making `call` and the tool turn answering it. `error`: the call was a mistake the trajectory
    recovers from, which SFT keeps in context but does not train on."""
    turn = {"role": "assistant", "reasoning_content": reasoning, "content": "", "tool_calls": [call.as_message_call()]}
    if error:
        turn["error"] = True
    return [turn, {"role": "tool", "content": result}]


def reply_turn(reasoning: str, content: str) -> dict:
    return {"role": "assistant", "reasoning_content": reasoning, "content": content}
