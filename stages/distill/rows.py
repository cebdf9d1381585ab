"""The sequences distillation trains on: what the student's engine saw and sampled, and whose teacher scores it.

A first-reply prompt gives one row: the prompt and the sampled reply. An agent episode gives one row per
segment of its trajectory (rollout/agents/trajectory.py): the model's turns with the environment's tokens
between them, masked out, so the teacher scores, and the loss trains, the model's tokens only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollout.agents.orchestrator import RolloutResult
from rollout.client import Sample
from stages.common.prompts import RlPrompt


@dataclass(frozen=True)
class StudentRow:
    teacher: str
    sample_id: str
    prompt_id: str
    task: str
    prompt_ids: list[int]
    response_ids: list[int]  # the model's tokens and, within an episode, the environment's between its turns
    loss_mask: list[int]  # 1 on the model's tokens
    logprobs: list[float]  # the student engine's, 0 on environment tokens
    weight_versions: list[int]
    status: str  # rollout@1's: ok, or truncated at the token limit
    turn_starts: list[int]  # where each of the model's turns begins in response_ids
    routed_experts: str | None = None  # the student engine's experts of every position but the last (SGLang's payload)


def sample_rows(samples: Sequence[Sample], prompts: Sequence[RlPrompt], batch_id: str) -> list[StudentRow]:
    """One row per first reply; `prompts[i]` carries its teacher (and its domain, if any) in its metadata."""
    return [StudentRow(p.metadata["teacher"], f"{batch_id}-reply-{i}", p.id, str(p.metadata.get("domain", p.metadata["teacher"])),
                       s.prompt_ids, s.output_ids, [1] * len(s.output_ids), s.output_logprobs, [int(s.weight_version)],
                       "truncated" if s.finish_reason == "length" else "ok", [0], s.routed_experts)
            for i, (s, p) in enumerate(zip(samples, prompts, strict=True))]


def episode_rows(results: Sequence[RolloutResult], teachers: Sequence[str]) -> list[StudentRow]:
    """Every segment of every episode whose environment did not fail (a failed environment says nothing
    about the model; its tokens are not trained)."""
    return [StudentRow(teacher, row["sample_id"], row["prompt_id"], row["task"], row["prompt_ids"], row["response_ids"],
                       row["loss_mask"], row["rollout_logprobs"], row["weight_versions"], row["status"], row["turn_starts"],
                       row.get("routed_experts"))
            for result, teacher in zip(results, teachers, strict=True) if result.status != "env_error"
            for row in result.rows]
