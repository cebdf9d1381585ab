"""Distillation's prompts: each teacher's prompt set, every prompt tagged with the teacher that scores it.

A teacher with `agent_tasks` gives agent episodes instead: its rows as its agentic RL stage posed them
(task, opening messages, reference, task metadata), to be played to the end by the student.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.store import ArtifactStore
from stages.common.agent_tasks import agent_task_rows, load_task_split
from stages.common.inputs import load_split
from stages.common.prompts import RlPrompt, parse_prompts, prompt_contract, stated_reference
from stages.distill.config import TeacherSpec


@dataclass(frozen=True)
class AgentEpisode:
    """One agent task row for the student to play whole; `teacher` scores every turn it samples."""

    task: str
    row: Mapping  # id, messages, reference_answer, metadata (as stages/common/agent_tasks.py gives them)
    teacher: str


def teacher_prompts(store: ArtifactStore, teachers: Sequence[TeacherSpec], tokenizer, workdir: Path, limit: int,
                    seed: int, data_seed: int = 0) -> dict[str, list[RlPrompt | AgentEpisode]]:
    """{teacher source: its train prompts}, each carrying `teacher` in its metadata: at most `limit` per
    teacher (a seeded sample; a run never draws more), so a 20,000-prompt set is not all tokenized.

    chat@1 rows (SFT's, reasoning and agentic RL's sets) give the conversation up to the first reply, tools
    included, whether or not their reply states an answer; prompt@1 rows (general RL's) give their prompt; a teacher with `agent_tasks` gets its
    task rows as whole episodes (`data_seed` rebuilds the search graphs they were generated on)."""
    prompts = {}
    for teacher in teachers:
        if teacher.agent_tasks:
            prompts[teacher.source] = agent_episodes(store, teacher, workdir, limit, seed, data_seed)
            continue
        mine: list[RlPrompt] = []
        for index, uri in enumerate(teacher.datasets):
            dataset = store.open(uri)
            local = workdir / "prompts" / teacher.source / str(index)
            contract = prompt_contract(dataset)
            rows = load_split([dataset], "train", local, contract)
            if len(rows) > limit:
                rows = random.Random(f"distill-prompts:{seed}:{teacher.source}:{index}").sample(rows, limit)
            parsed = parse_prompts(rows, contract, tokenizer, stated_reference)  # the teacher scores, not a verifier
            mine += [RlPrompt(p.id, p.messages, p.reference, p.prompt_ids, {**p.metadata, "teacher": teacher.source})
                     for p in parsed]
        if not mine:
            raise ValueError(f"teacher {teacher.source}: its datasets {teacher.datasets} hold no train prompts")
        prompts[teacher.source] = mine
    return prompts


def agent_episodes(store: ArtifactStore, teacher: TeacherSpec, workdir: Path, limit: int, seed: int,
                   data_seed: int) -> list[AgentEpisode]:
    """At most `limit` rows of each of the teacher's agent tasks (a seeded sample), tasks in config order:
    a task with a larger train split does not crowd out the others."""
    datasets = [store.open(uri) for uri in teacher.datasets]
    by_task = agent_task_rows(load_task_split(datasets, "train", workdir / "prompts" / teacher.source), teacher.agent_tasks,
                              data_seed)
    episodes = []
    for task in teacher.agent_tasks:
        rows = by_task[task]
        if len(rows) > limit:
            rows = random.Random(f"distill-episodes:{seed}:{teacher.source}:{task}").sample(rows, limit)
        episodes += [AgentEpisode(task, row, teacher.source) for row in rows]
    return episodes


def draw_prompts(prompts: Mapping[str, Sequence[RlPrompt | AgentEpisode]], shares: Mapping[str, int], count: int,
                 rng: random.Random) -> list[RlPrompt | AgentEpisode]:
    """`count` prompts, the teachers taking turns in a cycle where each appears `shares[source]` times (in
    config order), each prompt drawn at random from its teacher's set: every teacher keeps its share of
    the batch whatever its set's size."""
    cycle = [source for source in prompts for _ in range(shares[source])]
    return [rng.choice(prompts[cycle[i % len(cycle)]]) for i in range(count)]
