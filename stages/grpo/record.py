"""A GRPO step's trained samples as rollout@1 rows: what each module scored, the advantage it was trained
with, the trainer's logprobs beside the engine's, and how much of it IcePop dropped."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rollout.client import Sample
from stages.common.prompts import RlPrompt
from stages.common.rl_batches import response_values
from stages.common.rollout_record import masked_fraction, reward_input
from stages.grpo.rewards import reward_sample


def grpo_rows(stage: str, step: int, rank: int, prompts: Sequence[RlPrompt], samples: Sequence[Sample],
              scores: Sequence[list[dict]], rewards: torch.Tensor, advantages: torch.Tensor, anchors: torch.Tensor,
              logp_old: torch.Tensor, in_band: torch.Tensor) -> list[dict]:
    """One row per trained sample, `samples` being the chosen groups in order (G per prompt of `prompts`);
    `logp_old` and `in_band` are the step's [N, L-1] trainer logprobs and IcePop gate."""
    group_size = len(samples) // len(prompts)
    rows = []
    for i, sample in enumerate(samples):
        group, prompt = i // group_size, prompts[i // group_size]
        group_id = f"{stage}/step-{step}/rank-{rank}/group-{group}"
        length = len(sample.output_ids)
        anchor = bool(anchors[i])
        # An anchor is a person's reply: it trains the step's weights and no engine sampled it.
        version = step - 1 if anchor else int(sample.weight_version)
        rows.append({
            "sample_id": f"{group_id}/{i % group_size}", "group_id": group_id, "session_id": f"{group_id}/{i % group_size}",
            "prompt_id": prompt.id, "task": str(prompt.metadata.get("domain", stage)),
            "prompt_ids": sample.prompt_ids, "response_ids": sample.output_ids, "loss_mask": [1] * length,
            "rollout_logprobs": sample.output_logprobs, "weight_versions": [version],
            "reward": float(rewards.flatten()[i]), "status": "truncated" if sample.finish_reason == "length" else "ok",
            "old_logprobs": response_values(logp_old[i], len(sample.prompt_ids), length),
            "reward_scores": scores[i],
            "reward_input": reward_input(reward_sample(prompt, "")),
            "advantage": float(advantages[i]), "staleness": step - 1 - version,
            "masked_fraction": masked_fraction(response_values(in_band[i].float(), len(sample.prompt_ids), length),
                                               [1] * length),
            "anchor": anchor, "routed_experts": sample.routed_experts,
        })
    return rows
