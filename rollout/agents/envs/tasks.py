"""The agent tasks: what each environment's tools do and when an episode succeeded.

An episode is posed by a task row (the prompt messages, the reference answer and metadata such as
the search graph's seed). Each model turn is parsed as the chat format defines it; a well-formed turn
with tool calls gets the tools' results and the episode goes on, any other turn ends it. The episode
succeeds when its last turn is a well-formed reply stating the reference answer. A task may also grade
how far a finished episode got (`PartialCredit`): calc credits the worked steps its calculator calls
made, so a group whose episodes all miss the answer still tells the better attempts from the worse.

`take_turn` is the one place an episode is played: the task services run it for agentic RL, distillation
and the agentic evaluation, and SFT's search evaluation runs it in-process
(stages/evaluation/search_episodes.py), so every stage measures an episode's success the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, runtime_checkable

from model.tool_calls import ToolCall
from model.turns import TurnScore, score_turn
from rollout.agents.envs.sandbox import SandboxLimits, calculate
from suites.answers import stated_answer, stated_integer
from suites.arith import worked_steps
from suites.calc import QUESTION as CALC_QUESTION
from suites.calc import TOOLS as CALC_TOOLS
from suites.search import TOOLS as SEARCH_TOOLS
from suites.search import KnowledgeGraph, build_graph
from suites.search_tools import execute as execute_search

MAX_TOOL_CALLS_PER_TURN = 4
STEP_CALL = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)")  # one of arith's steps as a calculator call: "a op b"


@dataclass
class Episode:
    reference: str
    metadata: Mapping
    prompt: list[dict] = field(default_factory=list)  # the task's messages the episode was posed with
    final_reply: str | None = None  # the reply of a well-formed turn without tool calls
    turns: int = 0
    finished: bool = False
    tool_calls: int = 0
    calls: list[ToolCall] = field(default_factory=list)  # the calls the tools ran, in order


@dataclass(frozen=True)
class StepResult:
    turn: TurnScore  # the model's turn as parsed and scored (format validity, thinking compliance)
    tool_results: list[str] = field(default_factory=list)
    done: bool = False


class AgentTask(Protocol):
    name: str
    tools: list[dict]

    def check_row(self, reference: str, metadata: Mapping) -> None:
        """Raise ValueError naming the field when a task row cannot be played (checked at /reset)."""

    def execute(self, call: ToolCall, episode: Episode) -> str: ...

    def succeeded(self, episode: Episode) -> bool: ...


@runtime_checkable
class PartialCredit(Protocol):
    """A task that grades progress besides success. Training may add the grade to the reward
    (agentic RL's `partial_credit_weight`); success alone is what evaluations count."""

    def partial_credit(self, episode: Episode) -> float:
        """How far the finished episode got towards success, in [0, 1]."""


@runtime_checkable
class EndsEpisodes(Protocol):
    """A task that holds something for each running episode (the code tasks' sandboxed workspace): the task service
    ends each episode it verifies, abandons or forgets as idle, and those still running when it stops, so what an
    episode held is released at once."""

    def end_episode(self, episode: Episode) -> None: ...


def take_turn(task: AgentTask, episode: Episode, text: str) -> StepResult:
    """Apply one model turn (the text after the generation prompt, thinking on) to the episode."""
    if episode.finished:
        raise ValueError("the episode has already finished")
    episode.turns += 1
    turn = score_turn(text, thinking=True)
    if not turn.format_valid or not turn.parsed.tool_calls:
        episode.finished = True
        episode.final_reply = turn.parsed.reply if turn.format_valid else None
        return StepResult(turn, done=True)
    calls = turn.parsed.tool_calls
    episode.tool_calls += len(calls)
    # Each call may be a child process (the calculator): a turn asking for many is answered for the first few.
    refused = f"Error: at most {MAX_TOOL_CALLS_PER_TURN} tool calls per turn; this one was not run."
    episode.calls += calls[:MAX_TOOL_CALLS_PER_TURN]
    return StepResult(turn, [task.execute(call, episode) if index < MAX_TOOL_CALLS_PER_TURN else refused
                             for index, call in enumerate(calls)])


@lru_cache(maxsize=8)
def _graph(seed: int) -> KnowledgeGraph:
    return build_graph(seed)


class SearchTask:
    """Multi-hop questions over the embedded knowledge graph the row was generated on."""

    name, tools = "search", SEARCH_TOOLS

    def check_row(self, reference: str, metadata: Mapping) -> None:
        if type(metadata.get("graph_seed")) is not int:
            raise ValueError("metadata.graph_seed: a search row needs the integer seed of its knowledge graph")

    def execute(self, call: ToolCall, episode: Episode) -> str:
        return execute_search(call, _graph(int(episode.metadata["graph_seed"])))

    def succeeded(self, episode: Episode) -> bool:
        return episode.final_reply is not None and stated_answer(episode.final_reply) == episode.reference


class CalcTask:
    """Arithmetic with a sandboxed calculator tool: tool-integrated reasoning."""

    name, tools = "calc", CALC_TOOLS

    def __init__(self, limits: SandboxLimits = SandboxLimits()):
        self.limits = limits

    def check_row(self, reference: str, metadata: Mapping) -> None:
        if not reference.lstrip("-").isdigit():
            raise ValueError(f"reference: a calc row's answer is an integer, not {reference[:40]!r}")

    def execute(self, call: ToolCall, episode: Episode) -> str:
        if call.name != "calculate":
            return f"Error: unknown tool '{call.name}'."
        if set(call.arguments) != {"expression"}:
            return "Error: calculate takes exactly one argument, 'expression'."
        return calculate(call.arguments["expression"], self.limits)

    def succeeded(self, episode: Episode) -> bool:
        return episode.final_reply is not None and stated_integer(episode.final_reply) == int(episode.reference)

    def partial_credit(self, episode: Episode) -> float:
        """The share of the expression's steps the calculator calls made, in order: each step is three parts
        (the result so far, the operator, the operand), a call that makes all three completes the step and
        the next call is graded against the next step; the first call that misses earns the parts it got
        right and ends the grading (spacing aside; a call that is not "a op b" gets nothing). Graded by
        parts because the demo model's calls are mostly near misses ("4 - 4" for "4 + 4"): whole steps alone
        left almost every group's credit at 0. Measured by the calls, not the reply, so it rewards using the
        tool right even where the answer is then stated wrong or not at all. An episode whose last user
        message is not calc's question ("Use the calculator to compute E.") earns none."""
        asked = [m.get("content") for m in episode.prompt if m.get("role") == "user"]
        question = CALC_QUESTION.fullmatch(asked[-1].strip()) if asked and isinstance(asked[-1], str) else None
        if question is None:
            return 0.0
        try:
            steps = [STEP_CALL.fullmatch(step.split(" = ")[0]).groups() for step in worked_steps(question.group(1))]
        except (ValueError, AttributeError):  # not an expression arith writes: nothing to grade against
            return 0.0
        made = [STEP_CALL.fullmatch(str(call.arguments.get("expression", "")).strip()) for call in episode.calls
                if call.name == "calculate"]
        parts = 0
        for call, step in zip(made, steps, strict=False):
            right = sum(a == b for a, b in zip(call.groups(), step, strict=True)) if call else 0
            parts += right
            if right < len(step):
                break
        return parts / (3 * len(steps)) if steps else 0.0
