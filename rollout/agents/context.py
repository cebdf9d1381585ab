"""A multi-turn episode's context in token ids, with the search agent's context management.

The prompt of each turn is built from exact token ids (TITO): the first prompt, then for every
round the ids the engine generated and the ids of the environment's reply. Nothing the model wrote
is ever decoded and re-tokenized. Two rules keep long episodes inside the context (SPEC "Search-agent
context management"):
- keep-recent-k: environment replies older than the last k rounds are shown as a fixed placeholder;
- discard-all: once the context passes a token threshold, the tool history is dropped and the
  episode continues from the first prompt (system + question), keep-recent-k still on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OLD_RESULT_PLACEHOLDER = "[Earlier tool result omitted.]"


@dataclass(frozen=True)
class Round:
    model_ids: list[int]  # what the engine generated, ending with the stop token it chose
    env_ids: list[int]  # the environment's reply and the next turn's generation prompt
    placeholder_ids: list[int]  # the same reply with every result replaced by the placeholder


@dataclass
class EpisodeContext:
    prompt_ids: list[int]
    keep_recent: int = 5
    discard_above: int = 32_768
    rounds: list[Round] = field(default_factory=list)
    history_start: int = 0  # rounds before this were discarded
    discards: int = 0

    def __post_init__(self):
        if self.keep_recent < 0 or self.discard_above <= len(self.prompt_ids):
            raise ValueError("keep_recent must be ≥ 0 and discard_above longer than the first prompt")

    def add_round(self, model_ids: list[int], env_ids: list[int], placeholder_ids: list[int]) -> None:
        self.rounds.append(Round(list(model_ids), list(env_ids), list(placeholder_ids)))

    def next_prompt(self) -> list[int]:
        """The ids the engine is asked to continue, after applying both rules."""
        ids = self._render(self.rounds[self.history_start:])
        if len(ids) > self.discard_above:
            self.history_start, self.discards = len(self.rounds), self.discards + 1
            ids = list(self.prompt_ids)
        return ids

    def _render(self, rounds: list[Round]) -> list[int]:
        ids = list(self.prompt_ids)
        recent_from = len(rounds) - self.keep_recent
        for index, round_ in enumerate(rounds):
            ids += round_.model_ids
            ids += round_.env_ids if index >= recent_from else round_.placeholder_ids
        return ids
