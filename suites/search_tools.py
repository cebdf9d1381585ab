"""What the search suite's tools return on a knowledge graph, for a model's tool call: evaluation
episodes and the agent task service share it, and `matches_graph` checks it reproduces what the suite's
generator (suites/search.py) recorded in its rows."""

from __future__ import annotations

import json
from collections.abc import Mapping

from model.tool_calls import ToolCall
from suites.prepare import split_seed
from suites.search import KnowledgeGraph, build_graph

# The argument each tool of suites.search.TOOLS takes.
TOOL_PARAMETERS = {"search": "query", "open": "title"}


def split_graph(seed: int, split: str) -> KnowledgeGraph:
    """The graph a split's episodes were generated on (suites.prepare seeds each split separately)."""
    return build_graph(split_seed(seed, split))


def execute(call: ToolCall, graph: KnowledgeGraph) -> str:
    """A tool's result, or an error message the model can recover from, as in the training data."""
    parameter = TOOL_PARAMETERS.get(call.name)
    if parameter is None:
        return f"Error: unknown tool '{call.name}'."
    if set(call.arguments) != {parameter}:
        return f"Error: {call.name} takes exactly one argument, '{parameter}'."
    tool = graph.search if call.name == "search" else graph.open
    return tool(call.arguments[parameter])


def matches_graph(row: Mapping, graph: KnowledgeGraph) -> bool:
    """Whether replaying the row's reference tool calls on `graph` gives the row's tool results.

    A wrong seed or split would otherwise score every episode against the wrong graph, silently.
    """
    observed, replayed = [], []
    for message in row["messages"]:
        if message["role"] == "tool":
            observed.append(message["content"])
        for call in message.get("tool_calls") or []:
            replayed.append(execute(_recorded_call(call), graph))
    return observed == replayed


def _recorded_call(call: Mapping) -> ToolCall:
    return ToolCall(call["name"], json.loads(call["arguments_json"]))
