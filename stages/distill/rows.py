"""The sequences distillation trains on: what the student's engine saw and sampled, and whose teacher scores it.

A first-reply prompt gives one row: the prompt and the sampled reply. An agent episode gives one row per
segment of its trajectory (rollout/trajectory.py): the model's turns with the environment's tokens
between them, masked out, so the teacher scores, and the loss trains, the model's tokens only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollout.client import Sample
from rollout.orchestrator import RolloutResult


@dataclass(frozen=True)
class StudentRow:
    teacher: str
    prompt_ids: list[int]
    response_ids: list[int]  # the model's tokens and, within an episode, the environment's between its turns
    loss_mask: list[int]  # 1 on the model's tokens
    logprobs: list[float]  # the student engine's, 0 on environment tokens


def sample_rows(samples: Sequence[Sample], teachers: Sequence[str]) -> list[StudentRow]:
    return [StudentRow(teacher, s.prompt_ids, s.output_ids, [1] * len(s.output_ids), s.output_logprobs)
            for s, teacher in zip(samples, teachers, strict=True)]


def episode_rows(results: Sequence[RolloutResult], teachers: Sequence[str]) -> list[StudentRow]:
    """Every segment of every episode whose environment did not fail (a failed environment says nothing
    about the model; its tokens are not trained)."""
    return [StudentRow(teacher, row["prompt_ids"], row["response_ids"], row["loss_mask"], row["rollout_logprobs"])
            for result, teacher in zip(results, teachers, strict=True) if result.status != "env_error"
            for row in result.rows]
