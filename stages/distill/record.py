"""A distillation step's trained samples as rollout@1 rows: the student's tokens with its engine's and its
trainer's logprobs beside the teacher's, whose gap is each token's advantage (so no row-level advantage)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stages.common.rl_batches import response_values
from stages.common.rollout_record import masked_fraction
from stages.distill.rows import StudentRow


def distill_rows(stage: str, step: int, rank: int, rows: Sequence[StudentRow], logp_old: torch.Tensor,
                 logp_teacher: torch.Tensor, in_band: torch.Tensor) -> list[dict]:
    """One row per trained sequence (G = 1: each its own group); the tensors are the step's [N, L-1] ones."""
    records = []
    for i, row in enumerate(rows):
        sample_id = f"{stage}/step-{step}/rank-{rank}/{row.sample_id}"
        prompt, response = len(row.prompt_ids), len(row.response_ids)
        records.append({
            "sample_id": sample_id, "group_id": sample_id, "session_id": sample_id, "prompt_id": row.prompt_id,
            "task": row.task, "prompt_ids": row.prompt_ids, "response_ids": row.response_ids, "loss_mask": row.loss_mask,
            "rollout_logprobs": row.logprobs, "weight_versions": row.weight_versions, "status": row.status,
            "old_logprobs": response_values(logp_old[i], prompt, response),
            "teacher_logprobs": response_values(logp_teacher[i], prompt, response),
            "staleness": step - 1 - min(row.weight_versions),
            "masked_fraction": masked_fraction(response_values(in_band[i].float(), prompt, response), row.loss_mask),
            "turn_starts": row.turn_starts, "routed_experts": row.routed_experts,
        })
    return records
