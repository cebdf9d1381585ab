"""Human anchor replies as off-policy members of General RL's GRPO groups (`anchors.enabled`, off by default).

With the switch on, a prompt that has a reference reply samples G-1 responses from the policy and
its anchor joins as the G-th member: the reward modules score it like any member, so it takes part
in the group's mean and spread, and it is trained on like a sampled response with two differences:

- No engine sampled it, so it has no π_infer: its IcePop gate and PPO ratio use the trainer's own
  logprobs (ratio 1 on the one step taken per batch): it is never masked as a train/infer mismatch.
- It is importance-weighted: the behaviour policy is a person, whose probabilities we do not have,
  so the anchor counts as if it had probability 1 under them and its advantage is scaled by the
  policy's own per-token probability of it, exp(mean log π_old), floored at `anchors.min_weight`.
  An anchor the policy already nearly writes weighs like a sample; one far off-policy weighs little
  and cannot swamp the group's on-policy gradient.

An anchor is rendered as a reply with empty thinking, then the stop token the policy would emit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from model import special_tokens as st
from rollout.client import Sample
from stages.common.prompts import RlPrompt

ANCHOR_VERSION = "anchor"  # the weight_version of an anchor member: no policy version produced it


def anchor_sample(prompt: RlPrompt, tokenizer) -> Sample:
    ids = tokenizer(st.THINK_CLOSE + prompt.reference.strip(), add_special_tokens=False)["input_ids"]
    ids.append(tokenizer.convert_tokens_to_ids(st.USER))
    return Sample(prompt.prompt_ids, ids, [0.0] * len(ids), "stop", ANCHOR_VERSION)


def with_anchor_members(prompts: Sequence[RlPrompt], sampled: Sequence[Sample], group_size: int,
                        tokenizer) -> list[Sample]:
    """Groups of `group_size` in prompt order: a prompt with a reference gets its policy samples (G-1
    of them, in `sampled` order) then its anchor; one without gets G policy samples."""
    members, taken = [], 0
    for prompt in prompts:
        policy = group_size - 1 if prompt.reference else group_size
        members += sampled[taken:taken + policy]
        taken += policy
        if prompt.reference:
            members.append(anchor_sample(prompt, tokenizer))
    if taken != len(sampled):
        raise ValueError(f"{len(sampled)} sampled responses for groups that need {taken}")
    return members


def policy_requests(prompts: Sequence[RlPrompt], group_size: int, anchors: bool) -> list[list[int]]:
    """The prompt ids to sample, in group order: G per prompt, G-1 where an anchor fills the last seat."""
    return [p.prompt_ids for p in prompts for _ in range(group_size - (1 if anchors and p.reference else 0))]


def is_anchor(samples: Sequence[Sample]) -> torch.Tensor:
    return torch.tensor([s.weight_version == ANCHOR_VERSION for s in samples])


def anchor_weights(logp_old: torch.Tensor, response_mask: torch.Tensor, anchors: torch.Tensor,
                   min_weight: float) -> torch.Tensor:
    """[N] per-sample weights: 1 for policy samples; exp(mean log π_old over the anchor's tokens),
    clamped to [min_weight, 1], for anchors."""
    mean_logp = (logp_old * response_mask).sum(dim=1) / response_mask.sum(dim=1).clamp(min=1)
    weights = mean_logp.exp().clamp(min=min_weight, max=1.0)
    return torch.where(anchors, weights, torch.ones_like(weights))


def behaviour_logprobs(logp_infer: torch.Tensor, logp_old: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """The engine's logprobs for policy samples; the trainer's own for anchors, which no engine sampled."""
    return torch.where(anchors.unsqueeze(1), logp_old, logp_infer)
