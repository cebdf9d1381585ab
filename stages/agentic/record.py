"""An agentic RL step's trained rollouts as rollout@1 rows: every segment of every group member (a refilled
group's repeated members again, as they were trained), with its rollout's trained reward, the reward's parts
(success, and the task's partial credit where it grades progress) and its advantage, its staleness against
the weights it trained, and how much of it the importance-sampling gate dropped."""

from __future__ import annotations

import torch

from stages.common.rl_batches import response_values
from stages.common.rollout_record import masked_fraction


def agentic_rows(stage: str, step: int, groups: list, rewards: list[list[float]], advantages: torch.Tensor,
                 logp_old: torch.Tensor, kept: torch.Tensor, trained_version: int) -> list[dict]:
    """`groups` as the step trained them (lists of RolloutResult); `rewards` each one's trained reward, as `groups`;
    `advantages` one per rollout in that order; `logp_old` and `kept` the step's [segments, L-1] trainer
    logprobs and gate, segments in that order."""
    records, rollout, segment = [], 0, 0
    for results, trained in zip(groups, rewards, strict=True):
        group_id = f"{stage}/step-{step}/{results[0].spec.group_id}"
        for member, (result, reward) in enumerate(zip(results, trained, strict=True)):
            parts = [{"module": f"{result.spec.task}/success", "score": result.reward}]
            if result.credit is not None:
                parts.append({"module": f"{result.spec.task}/partial_credit", "score": result.credit})
            for index, row in enumerate(result.rows):
                prompt, response = len(row["prompt_ids"]), len(row["response_ids"])
                records.append({
                    **row, "sample_id": f"{group_id}/member-{member}/segment-{index}", "group_id": group_id,
                    "session_id": f"{group_id}/member-{member}", "reward": reward, "reward_scores": parts,
                    "advantage": float(advantages[rollout]),
                    "old_logprobs": response_values(logp_old[segment], prompt, response),
                    "staleness": trained_version - min(row["weight_versions"]),
                    "masked_fraction": masked_fraction(response_values(kept[segment], prompt, response), row["loss_mask"]),
                })
                segment += 1
            rollout += 1
    return records
