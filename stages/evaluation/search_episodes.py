"""`search`: multi-turn tool episodes against the split's knowledge graph, batched turn by turn.

Each turn is generated with thinking on (the suite reasons before every call) and played by the search
task's own rules (`take_turn` with `SearchTask`, rollout/agents/envs/tasks.py), the code agentic RL's task
service runs, so SFT and RL measure search success alike: a format-valid turn with tool calls gets its
results appended and the episode continues, any other turn ends it; an episode succeeds when its last
turn is a valid reply stating the expected city. Here the conversation is kept as messages, rendered
afresh for each turn by the evaluation's generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from model.turns import TurnScore
from rollout.agents.envs.tasks import Episode, SearchTask, take_turn
from stages.common.prompts import prompt_messages, reference_answer, row_tools
from stages.evaluation.prompts import GenerateTurns, Prompt
from suites.prepare import split_seed

SEARCH = SearchTask()


@dataclass
class EvalEpisode:
    """A search episode as the evaluation plays it: the task's state of it, the conversation the model is
    prompted with, and the score of each turn it generated."""

    id: str
    state: Episode
    tools: list[dict] | None
    messages: list[dict]
    turns: list[TurnScore] = field(default_factory=list)

    @classmethod
    def start(cls, row: Mapping, seed: int) -> EvalEpisode:
        """`row`'s episode on the graph its split was generated on (`seed`: the one the rows were prepared with)."""
        state = Episode(reference_answer(row), {"graph_seed": split_seed(seed, row["split"])})
        return cls(row["id"], state, row_tools(row), list(prompt_messages(row)))

    def prompt(self) -> Prompt:
        return Prompt(tuple(self.messages), self.tools, enable_thinking=True)

    def add_turn(self, text: str) -> None:
        played = take_turn(SEARCH, self.state, text)
        self.turns.append(played.turn)
        if played.done:
            return
        parsed = played.turn.parsed
        self.messages.append({
            "role": "assistant",
            "reasoning_content": parsed.reasoning,
            "content": parsed.reply,
            "tool_calls": [call.as_message_call() for call in parsed.tool_calls],
        })
        self.messages += [{"role": "tool", "content": result} for result in played.tool_results]

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def success(self) -> bool:
        return SEARCH.succeeded(self.state)


def run_episodes(
    rows: Sequence[Mapping],
    seed: int,
    generate: GenerateTurns,
    *,
    batch_size: int,
    max_turns: int,
    advance: Callable[[int], None],
) -> list[EvalEpisode]:
    """Play each row's episode; `seed` is the one the rows were prepared with (each split's graph comes from it)."""
    episodes = []
    for start in range(0, len(rows), batch_size):
        batch = [EvalEpisode.start(row, seed) for row in rows[start : start + batch_size]]
        for _ in range(max_turns):
            active = [episode for episode in batch if not episode.finished]
            if not active:
                break
            for episode, text in zip(active, generate([e.prompt() for e in active]), strict=True):
                episode.add_turn(text)
        advance(len(batch))
        episodes += batch
    return episodes
