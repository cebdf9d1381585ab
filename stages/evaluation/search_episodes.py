"""`search`: multi-turn tool episodes against the split's knowledge graph, batched turn by turn.

Each turn is generated with thinking on (the suite reasons before every call). A format-valid turn
with tool calls gets its results appended and the episode continues; any other turn ends it. An
episode succeeds when its last turn is a valid reply stating the expected city.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from model.turns import TurnScore, score_turn
from stages.common.prompts import prompt_messages, reference_answer, row_tools
from stages.evaluation.prompts import GenerateTurns, Prompt
from suites.answers import stated_answer
from suites.search import KnowledgeGraph
from suites.search_tools import execute


@dataclass
class Episode:
    id: str
    expected: str
    graph: KnowledgeGraph
    tools: list[dict] | None
    messages: list[dict]
    turns: list[TurnScore] = field(default_factory=list)
    finished: bool = False

    @classmethod
    def start(cls, row: Mapping, graph: KnowledgeGraph) -> Episode:
        return cls(row["id"], reference_answer(row), graph, row_tools(row), list(prompt_messages(row)))

    def prompt(self) -> Prompt:
        return Prompt(tuple(self.messages), self.tools, enable_thinking=True)

    def take_turn(self, text: str) -> None:
        turn = score_turn(text, thinking=True)
        self.turns.append(turn)
        if not turn.format_valid or not turn.parsed.tool_calls:
            self.finished = True
            return
        calls = turn.parsed.tool_calls
        self.messages.append({
            "role": "assistant",
            "reasoning_content": turn.parsed.reasoning,
            "content": turn.parsed.reply,
            "tool_calls": [call.as_message_call() for call in calls],
        })
        self.messages += [{"role": "tool", "content": execute(call, self.graph)} for call in calls]

    @property
    def success(self) -> bool:
        if not self.turns:
            return False
        last = self.turns[-1]
        return last.format_valid and not last.parsed.tool_calls and stated_answer(last.parsed.reply) == self.expected


def run_episodes(
    rows: Sequence[Mapping],
    graphs: Mapping[str, KnowledgeGraph],
    generate: GenerateTurns,
    *,
    batch_size: int,
    max_turns: int,
    advance: Callable[[int], None],
) -> list[Episode]:
    """Play each row's episode; `graphs` maps a row's split to its graph."""
    episodes = []
    for start in range(0, len(rows), batch_size):
        batch = [Episode.start(row, graphs[row["split"]]) for row in rows[start : start + batch_size]]
        for _ in range(max_turns):
            active = [episode for episode in batch if not episode.finished]
            if not active:
                break
            for episode, text in zip(active, generate([e.prompt() for e in active]), strict=True):
                episode.take_turn(text)
        advance(len(batch))
        episodes += batch
    return episodes
