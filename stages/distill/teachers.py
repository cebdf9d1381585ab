"""The teachers of on-policy distillation: one inference engine each, scoring the student's samples.

Scoring is a prefill: the engine receives the exact token ids the student's engine produced
(prompt + response, TITO) with `max_new_tokens` 0 and `return_logprob`, as SGLang's `/generate`
takes them, and returns log π_teacher of every token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from model.precision import Precision
from rollout.engines import launch_engines
from rollout.fleet_client import FleetClient
from stages.distill.config import TeacherSpec
from stages.distill.rows import StudentRow


def teacher_engines(stack: ExitStack, teachers: Sequence[TeacherSpec], workdir: Path, seed: int,
                    precision: Precision = "auto") -> dict[str, FleetClient]:
    """{source: client}: each teacher's engines (`teacher.engines`) serving its checkpoint until `stack`
    closes. Every teacher's engines launch before any is waited on: each takes seconds to load."""
    ready = {teacher.source: launch_engines(stack, teacher.engines, teacher.checkpoint,
                                            workdir / f"teacher-{teacher.source}", seed=seed, precision=precision)
             for teacher in teachers}
    return {source: fleet_ready().client for source, fleet_ready in ready.items()}


def teacher_logprobs(engines: Mapping[str, FleetClient], rows: Sequence[StudentRow]) -> list[list[float]]:
    """log π_teacher of each row's response tokens, scored by the teacher the row names, one batched
    request per teacher (environment tokens inside an episode's response are scored too; the mask drops them)."""
    result: list[list[float] | None] = [None] * len(rows)
    for source in dict.fromkeys(row.teacher for row in rows):
        mine = [i for i, row in enumerate(rows) if row.teacher == source]
        scored = engines[source].prompt_logprobs([rows[i].prompt_ids + rows[i].response_ids for i in mine])
        for i, logprobs in zip(mine, scored, strict=True):
            response = logprobs[len(rows[i].prompt_ids):]
            if len(response) != len(rows[i].response_ids) or any(lp is None for lp in response):
                raise ValueError(f"teacher {source} returned {len(response)} logprobs for a response of "
                                 f"{len(rows[i].response_ids)} tokens")
            result[i] = response
    return result
