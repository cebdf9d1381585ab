"""Distillation's prompts: each teacher's RL prompt set, every prompt tagged with the teacher that scores it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from data_contracts import CHAT_V1, PROMPT_V1
from infra.publish import published_contract
from infra.store import ArtifactStore
from stages.distill_config import TeacherSpec
from stages.general_rl import general_prompts
from stages.rl_rollouts import RlPrompt, rl_prompts
from stages.sft_data import load_split


def teacher_prompts(store: ArtifactStore, teachers: Sequence[TeacherSpec], tokenizer, workdir: Path, limit: int,
                    seed: int) -> dict[str, list[RlPrompt]]:
    """{teacher source: its train prompts}, each carrying `teacher` in its metadata: at most `limit` per
    teacher (a seeded sample; a run never draws more), so a 20,000-prompt set is not all tokenized.

    chat@1 rows (reasoning and agentic RL's sets) give the conversation up to the first reply, tools
    included; prompt@1 rows (general RL's) give their prompt."""
    prompts = {}
    for teacher in teachers:
        mine: list[RlPrompt] = []
        for index, uri in enumerate(teacher.datasets):
            dataset = store.open(uri)
            local = workdir / "prompts" / teacher.source / str(index)
            contract = PROMPT_V1 if published_contract(dataset) == PROMPT_V1.id else CHAT_V1
            rows = load_split([dataset], "train", local, contract)
            if len(rows) > limit:
                rows = random.Random(f"distill-prompts:{seed}:{teacher.source}:{index}").sample(rows, limit)
            parsed = general_prompts(rows, tokenizer) if contract is PROMPT_V1 else rl_prompts(rows, tokenizer)
            mine += [RlPrompt(p.id, p.messages, p.reference, p.prompt_ids, {**p.metadata, "teacher": teacher.source})
                     for p in parsed]
        if not mine:
            raise ValueError(f"teacher {teacher.source}: its datasets {teacher.datasets} hold no train prompts")
        prompts[teacher.source] = mine
    return prompts


def draw_prompts(prompts: Mapping[str, Sequence[RlPrompt]], shares: Mapping[str, int], count: int,
                 rng: random.Random) -> list[RlPrompt]:
    """`count` prompts, the teachers taking turns in a cycle where each appears `shares[source]` times (in
    config order), each prompt drawn at random from its teacher's set: every teacher keeps its share of
    the batch whatever its set's size."""
    cycle = [source for source in prompts for _ in range(shares[source])]
    return [rng.choice(prompts[cycle[i % len(cycle)]]) for i in range(count)]
