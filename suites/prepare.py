"""The embedded suites as contract rows with held-out splits: what `posttrain demo` publishes.

Every suite yields `Example`s — one conversation plus what RL needs to grade it — from which come its
`chat@1` SFT rows (with a thinking-mode mix), its `prompt@1` RL prompts and, for suites with a notion of
a worse reply, `preference@1` pairs. A test split never repeats a training prompt (`_split`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from pydantic import Field

from data_contracts.conversation import message_record
from model.thinking import CHAT_THINKING_MODE, DEFAULT_THINKING_MIX, apply_thinking_mode, assign_modes
from suites import arith, calc, chat, code, instruct, judge, search, swe, terminal

# A suite's rows are generated in memory: past a million, a size is a typo (1e38), not a plan.
MAX_SUITE_ROWS = 1_000_000


@dataclass(frozen=True)
class SuiteSizes:
    """A suite's split sizes; bounded where a spec or a form gives them (pydantic reads the annotations)."""

    train: Annotated[int, Field(ge=1, le=MAX_SUITE_ROWS)] = 2000
    test: Annotated[int, Field(ge=1, le=MAX_SUITE_ROWS)] = 500


@dataclass(frozen=True)
class Example:
    """One suite item: its full conversation plus what RL needs to pose and grade its prompt."""

    id: str
    messages: tuple[dict, ...]
    # What an RL reward grades against: the answer, or null where a rule or a reward model grades.
    reference_answer: str | None = None
    metadata: Mapping | None = None
    tools: Sequence[Mapping] | None = None

    @property
    def prompt(self) -> tuple[dict, ...]:
        """The conversation up to the first assistant turn: what an RL policy is asked."""
        first_reply = next(i for i, message in enumerate(self.messages) if message["role"] == "assistant")
        return self.messages[:first_reply]


@dataclass(frozen=True)
class Pair:
    """A prompt with a better and a worse reply to it."""

    id: str
    prompt: tuple[dict, ...]
    chosen: str
    rejected: str


def split_seed(seed: int, split: str) -> int:
    """The seed a split is generated from; evaluators rebuild a split's search graph from it."""
    # Splits use different seeds, so held-out problems are drawn independently of training ones.
    return seed * 2 + (split == "test")


def _arith_examples(split: str, count: int, seed: int) -> list[Example]:
    return [
        Example(p.id, tuple(p.messages()), str(p.answer), {"level": p.level, "expression": p.expression})
        for p in arith.generate(count, split_seed(seed, split))
    ]


def _calc_examples(split: str, count: int, seed: int) -> list[Example]:
    return [
        Example(e.id, tuple(e.messages()), str(e.answer), {"level": e.level, "expression": e.expression}, calc.TOOLS)
        for e in calc.generate(count, split_seed(seed, split))
    ]


def _code_examples(split: str, count: int, seed: int) -> list[Example]:
    # The reference is the hidden test calls (suites/code_cases.py) that rewards.verifiers.CodeTests runs.
    return [Example(p.id, tuple(p.messages()), p.reference, {"template": p.template, "function": p.drawn.function})
            for p in code.generate(count, split_seed(seed, split))]


def _swe_examples(split: str, count: int, seed: int) -> list[Example]:
    # The metadata holds the repository and its hidden tests, all the swe task needs; the reference is the fix's diff.
    return [Example(e.id, e.messages, e.repository.reference, e.repository.metadata(), swe.TOOLS)
            for e in swe.generate(count, split_seed(seed, split))]


def _terminal_examples(split: str, count: int, seed: int) -> list[Example]:
    # The metadata holds the folder's files and the check the terminal task runs; the reference is a solution.
    return [Example(e.id, e.messages, e.problem.solution, e.metadata(), terminal.TOOLS)
            for e in terminal.generate(count, split_seed(seed, split))]


def _search_examples(split: str, count: int, seed: int) -> list[Example]:
    # The graph seed lets an RL environment rebuild the graph the episode's tools answer from.
    graph_seed = split_seed(seed, split)
    return [
        Example(e.id, e.messages, e.answer, {"graph_seed": graph_seed, "question": e.question}, search.TOOLS)
        for e in search.generate(count, graph_seed)
    ]


def _instruct_examples(split: str, count: int, seed: int) -> list[Example]:
    # Graded by rule (`instruct.check`) on the constraints; the reference is a reply that meets them,
    # the anchor a GRM grades against and General RL's anchor members train toward.
    return [
        Example(item.id, tuple(item.messages()), item.reference,
                {"topic": item.topic, "constraints": list(item.constraints)})
        for item in instruct.generate(count, seed, split)
    ]


def _chat_examples(split: str, count: int, seed: int) -> list[Example]:
    # The anchor is the reference a GRM grades against, not an answer to match.
    return [
        Example(p.id, tuple(p.messages()), p.anchor, {"subject": p.subject})
        for p in chat.generate(count, seed, split)
    ]


def _judge_examples(split: str, count: int, seed: int) -> list[Example]:
    return [Example(e.id, tuple(e.messages()), str(e.score), {"reply_kind": e.reply_kind})
            for e in judge.generate(count, seed, split)]


def _instruct_pairs(split: str, count: int, seed: int) -> list[Pair]:
    return [
        Pair(f"{item.id}-pref", tuple(item.messages()[:1]), item.reference, item.violating_reply)
        for item in instruct.generate(count, seed, split)
    ]


def _chat_pairs(split: str, count: int, seed: int) -> list[Pair]:
    return [
        Pair(f"{p.prompt.id}-{p.rejection_kind}", tuple(p.prompt.prompt_messages()), p.chosen, p.rejected)
        for p in chat.preference_pairs(count, seed, split)
    ]


SUITES: dict[str, Callable[[str, int, int], list[Example]]] = {
    "arith": _arith_examples,
    "search": _search_examples,
    "calc": _calc_examples,
    "code": _code_examples,  # Python functions graded by hidden tests in the code sandbox
    "swe": _swe_examples,  # fix a generated repository's bug; agentic, in the code sandbox
    "terminal": _terminal_examples,  # file and text chores with bash; agentic, in the code sandbox
    "instruct": _instruct_examples,
    "chat": _chat_examples,
    "judge": _judge_examples,  # verdicts against anchors: SFT on it makes a checkpoint a GRM judge
}
# Agent-task suites whose episodes are posed from what only their prompt@1 rows carry (the repository and its hidden
# tests, the folder and its checker), not from their conversations as search and calc are: a stage or evaluation
# that plays their episodes reads those task rows.
TASK_ROW_SUITES = ("swe", "terminal")
# Suites whose RL reference only their prompt@1 rows carry (code's hidden test calls; its conversations answer with a
# solution, not a checkable answer): reasoning RL and its held-out evaluation read their prompt rows.
REFERENCE_ROW_SUITES = ("code",)
PREFERENCE_SUITES: dict[str, Callable[[str, int, int], list[Pair]]] = {
    "instruct": _instruct_pairs,
    "chat": _chat_pairs,
}

Item = TypeVar("Item", Example, Pair)


def user_text(messages: Sequence[Mapping]) -> str:
    return "\n".join(message["content"] for message in messages if message["role"] == "user")


def _split(make: Callable[[str, int, int], list[Item]], sizes: SuiteSizes, seed: int) -> dict[str, list[Item]]:
    """Train and test items, with every test item whose user prompt training also asks dropped.

    Suites that draw both splits from one space (arith's numbers, search's names) can collide by
    chance; dropped items are replaced by drawing further, which works because every generator's
    longer run starts with its shorter one.
    """
    train = make("train", sizes.train, seed)
    seen = {user_text(item.prompt) for item in train}
    drawn = sizes.test
    while True:
        test = [item for item in make("test", drawn, seed) if user_text(item.prompt) not in seen]
        if len(test) >= sizes.test:
            return {"train": train, "test": test[: sizes.test]}
        if drawn > 16 * (sizes.test + 1):
            raise ValueError(f"cannot draw {sizes.test} held-out items that training does not already ask")
        drawn *= 2


def chat_row(conversation_id: str, suite: str, split: str, messages, tools=None, thinking_mode="interleaved") -> dict:
    return {
        "id": conversation_id,
        "suite": suite,
        "split": split,
        "thinking_mode": thinking_mode,
        "tools_json": json.dumps(tools, ensure_ascii=False) if tools else None,
        "messages": [message_record(message) for message in messages],
    }


def _chat_rows(suite: str, split: str, examples: list[Example], seed: int, thinking_mix: Mapping[str, float]):
    modes = assign_modes([example.id for example in examples], thinking_mix, seed)
    rows = []
    for example, mode in zip(examples, modes, strict=True):
        messages, _ = apply_thinking_mode(example.messages, mode)
        rows.append(chat_row(example.id, suite, split, messages, example.tools, CHAT_THINKING_MODE[mode]))
    return rows


def suite_splits(
    suite: str, sizes: SuiteSizes, seed: int, thinking_mix: Mapping[str, float] = DEFAULT_THINKING_MIX
) -> dict[str, list[dict]]:
    """chat@1 rows of one suite per split; `thinking_mix` weighs the modes of `suites.thinking.MODES`."""
    splits = _split(SUITES[suite], sizes, seed)
    return {split: _chat_rows(suite, split, examples, seed, thinking_mix) for split, examples in splits.items()}


def prompt_splits(suite: str, sizes: SuiteSizes, seed: int) -> dict[str, list[dict]]:
    """prompt@1 rows of one suite per split: the same prompts its chat@1 rows answer."""

    def row(example: Example) -> dict:
        return {
            "id": example.id,
            "domain": suite,
            "source": f"suites.{suite}",
            "messages": [message_record(message) for message in example.prompt],
            "reference_answer": example.reference_answer,
            "metadata_json": json.dumps(example.metadata, ensure_ascii=False, sort_keys=True),
        }

    return {split: [row(e) for e in examples] for split, examples in _split(SUITES[suite], sizes, seed).items()}


def preference_splits(suite: str, sizes: SuiteSizes, seed: int) -> dict[str, list[dict]]:
    """preference@1 rows of one of `PREFERENCE_SUITES` per split."""

    def row(pair: Pair) -> dict:
        return {
            "id": pair.id,
            "domain": suite,
            "prompt": [message_record(message) for message in pair.prompt],
            "chosen": pair.chosen,
            "rejected": pair.rejected,
            "source": f"suites.{suite}",
        }

    splits = _split(PREFERENCE_SUITES[suite], sizes, seed)
    return {split: [row(pair) for pair in pairs] for split, pairs in splits.items()}
