"""Rule rewards on the instruct suite's constraints, and the General RL mix: gate, normalization, weights."""

import pytest
from pydantic import ValidationError

from rewards import RewardModuleError, RewardSample
from rewards.mix import MixedReward
from rewards.rules import InstructGate, InstructSoft

PROMPT = ({"role": "user", "content": "Write about the ocean."},)
TWO_RULES = [{"kind": "word_count", "n": 3}, {"kind": "ends_with", "suffix": "!"}]


def instruct(reply, constraints=TWO_RULES, finished=True, **metadata):
    response = f"Write three words.</think>{reply}" + ("<|user|>" if finished else "")
    return RewardSample(PROMPT, response, None, {"domain": "instruct", "constraints": constraints, **metadata})


class Fixed:
    """Returns the scores it is given, by position: a component whose output the test chooses."""

    name, version = "fixed", "1"

    def __init__(self, scores):
        self.scores = scores

    def __call__(self, samples):
        return self.scores[: len(samples)]


class Broken:
    name, version = "broken_orm", "3"

    def __call__(self, samples):
        raise RuntimeError("checkpoint missing")


def fixed(scores, **spec):
    return {"path": f"{__name__}.Fixed", "params": {"scores": scores}, **spec}


def test_rules_gate_on_every_constraint_and_score_the_share_met():
    samples = [instruct("Waves tides coral!"), instruct("Waves tides coral."), instruct("Waves tides."),
               instruct("Waves tides coral!", finished=False), instruct("Waves tides coral!", constraints=None)]
    assert InstructGate()(samples) == [1.0, 0.0, 0.0, 0.0, None]
    assert InstructSoft()(samples) == [1.0, 0.5, 0.0, 0.0, None]


def test_a_failed_hard_rule_gives_the_minimum_whatever_the_other_scores():
    mix = MixedReward(gates=[{"path": "rewards.rules.InstructGate"}],
                      domains={"instruct": [fixed([0.9, 0.9])]})
    assert mix([instruct("Waves tides coral!"), instruct("Waves tides coral.")]) == [0.9, 0.0]


def test_components_are_normalized_then_weighted_per_domain():
    chat = RewardSample(PROMPT, "Hi.</think>Hello.<|user|>", "anchor", {"domain": "chat"})
    mix = MixedReward(domains={
        "instruct": [fixed([0.5]), fixed([7.0], weight=3.0, scale=(1.0, 10.0))],
        "chat": [fixed([0.0], scale="sigmoid")],
    })
    instruct_score, chat_score = mix([instruct("Waves tides coral!"), chat])
    assert instruct_score == pytest.approx((0.5 + 3.0 * (6.0 / 9.0)) / 4.0)
    assert chat_score == pytest.approx(0.5)
    clipped = MixedReward(domains={"instruct": [fixed([12.0], scale=(1.0, 10.0))]})
    assert clipped([instruct("x")]) == [1.0]


def test_an_unscorable_sample_is_none_never_a_made_up_number():
    other_domain = RewardSample(PROMPT, "x</think>y<|user|>", None, {"domain": "search"})
    mix = MixedReward(domains={"instruct": [fixed([None, 0.7])]})
    assert mix([instruct("a"), instruct("b"), other_domain]) == [None, 0.7, None]


def test_a_failing_component_fails_the_batch_naming_it():
    mix = MixedReward(domains={"instruct": [{"path": f"{__name__}.Broken"}]})
    with pytest.raises(RewardModuleError, match="broken_orm.*checkpoint missing"):
        mix([instruct("a")])


def test_bad_mix_configs_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="lo < hi"):
        MixedReward(domains={"instruct": [fixed([1.0], scale=(2.0, 1.0))]})
    with pytest.raises(ValidationError, match="weight"):
        MixedReward(domains={"instruct": [fixed([1.0], weight=0)]})
    with pytest.raises(RewardModuleError, match="cannot be imported"):
        MixedReward(domains={"instruct": [{"path": "rewards.nowhere.Orm"}]})
    assert {path for path, _, _ in MixedReward(gates=[{"path": "rewards.rules.InstructGate"}],
                                              domains={"instruct": [fixed([1.0])]}).components()} \
        == {"rewards.rules.InstructGate", f"{__name__}.Fixed"}
