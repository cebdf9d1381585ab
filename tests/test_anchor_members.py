"""Anchor replies as off-policy GRPO members: group assembly, importance weights, behaviour logprobs."""

import math

import pytest
import torch

from rollout.client import Sample
from stages.common.prompts import RlPrompt
from stages.grpo.anchors import (
    ANCHOR_VERSION,
    anchor_sample,
    anchor_weights,
    behaviour_logprobs,
    is_anchor,
    policy_requests,
    with_anchor_members,
)


def prompt(name: str, reference: str | None) -> RlPrompt:
    return RlPrompt(name, ({"role": "user", "content": name},), reference, [1, 2, len(name)])


def sampled(name: str, index: int) -> Sample:
    return Sample([1, 2, len(name)], [10 + index], [-0.5], "stop", "3")


def test_a_prompt_with_a_reference_samples_one_fewer_and_its_anchor_takes_the_last_seat(tokenizer):
    prompts = [prompt("anchored", "Sourdough is flour and water."), prompt("bare", None)]
    requests = policy_requests(prompts, group_size=3, anchors=True)
    assert [len(ids) for ids in requests] == [3, 3, 3, 3, 3]  # 2 for "anchored", 3 for "bare"
    assert policy_requests(prompts, group_size=3, anchors=False) == [prompts[0].prompt_ids] * 3 + [prompts[1].prompt_ids] * 3
    samples = [sampled("anchored", 0), sampled("anchored", 1), sampled("bare", 2), sampled("bare", 3), sampled("bare", 4)]
    members = with_anchor_members(prompts, samples, 3, tokenizer)
    assert is_anchor(members).tolist() == [False, False, True, False, False, False]
    assert members[:2] == samples[:2] and members[3:] == samples[2:]
    anchor = members[2]
    assert anchor.prompt_ids == prompts[0].prompt_ids and anchor.weight_version == ANCHOR_VERSION
    assert tokenizer.decode(anchor.output_ids, skip_special_tokens=False) == "</think>Sourdough is flour and water.<|user|>"
    with pytest.raises(ValueError, match="4 sampled responses for groups that need 5"):
        with_anchor_members(prompts, samples[:4], 3, tokenizer)


def test_anchor_weight_is_the_policys_per_token_probability_floored_and_capped():
    logp_old = torch.tensor([[-0.1, -0.3, 0.0], [-5.0, -7.0, 0.0], [-0.2, -0.2, -9.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    anchors = torch.tensor([True, True, False, True])
    weights = anchor_weights(logp_old, mask, anchors, min_weight=0.05)
    assert weights[0].item() == pytest.approx(math.exp(-0.2))  # mean over its two response tokens
    assert weights[1].item() == pytest.approx(0.05)  # exp(-6) is below the floor
    assert weights[2].item() == 1.0  # a policy sample is not reweighted, however unlikely
    assert weights[3].item() == 1.0  # probability 1 is the cap


def test_anchors_use_the_trainers_logprobs_as_behaviour_so_icepop_never_masks_them():
    logp_infer, logp_old = torch.full((2, 3), -1.0), torch.full((2, 3), -2.0)
    behaviour = behaviour_logprobs(logp_infer, logp_old, torch.tensor([False, True]))
    assert behaviour[0].tolist() == [-1.0] * 3 and behaviour[1].tolist() == [-2.0] * 3


def test_anchor_sample_ends_with_the_policys_stop_token(tokenizer):
    sample = anchor_sample(prompt("q", "  Plain reply. "), tokenizer)
    assert sample.output_ids[-1] == tokenizer.convert_tokens_to_ids("<|user|>")
    assert len(sample.output_logprobs) == len(sample.output_ids) and sample.finish_reason == "stop"
