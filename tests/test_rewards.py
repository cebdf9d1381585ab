"""Reward modules: the verifiers, loading by dotted path, and the guard around every call."""

import hashlib
import math
import time
from pathlib import Path

import pytest

import rewards.verifiers
from rewards import RewardModuleError, RewardSample, load_reward_module, reward_module_ref, score_batch
from rewards.verifiers import AnswerMatch, ArithExactMatch, ArithStepPrefix, FormatValid
from suites import arith

PROMPT = ({"role": "user", "content": "Compute 2 + 3 * 4."},)


def sample(response, reference="14"):
    return RewardSample(PROMPT, response, reference)


class Raises:
    name, version = "raises", "1"

    def __call__(self, samples):
        raise KeyError("no such field")


class Hangs:
    name, version = "hangs", "1"

    def __call__(self, samples):
        time.sleep(5)
        return [0.0] * len(samples)


class Returns:
    name, version = "returns", "1"

    def __init__(self, scores):
        self.scores = scores

    def __call__(self, samples):
        return self.scores


def test_arith_exact_match_needs_a_well_formed_turn_stating_the_reference():
    good = "3 * 4 = 12, 2 + 12 = 14.</think>The answer is 14.<|user|>"
    scores = ArithExactMatch()([
        sample(good),
        sample(good.replace("14.<|user|>", "15.<|user|>")),
        sample(good.removesuffix("<|user|>")),  # never stopped: not a finished reply
        sample("The answer is 14.<|user|>"),  # thinking on, but no reasoning closed
        sample(good, reference=None),
    ])
    assert scores == [1.0, 0.0, 0.0, 0.0, None]
    assert FormatValid()([sample(good), sample(good.removesuffix("<|user|>"))]) == [1.0, 0.0]


def test_answer_match_compares_the_stated_answer_with_any_reference_text():
    stated = "Paris is the capital.</think>The answer is  paris .<|user|>"
    scores = AnswerMatch()([
        sample(stated, reference="Paris"),  # case and surrounding space do not count
        sample(stated, reference="Lyon"),
        sample(stated.removesuffix("<|user|>"), reference="Paris"),  # never stopped
        sample("</think>Paris.<|user|>", reference="Paris"),  # not stated as the answer
        sample(stated, reference=None),
    ])
    assert scores == [1.0, 0.0, 0.0, 0.0, None]


def test_step_prefix_credits_the_worked_steps_up_to_the_first_mistake():
    question = ({"role": "user", "content": "Compute ((5 + 3) * 2) - 4."},)

    def scored(reasoning, stop="<|user|>"):
        return ArithStepPrefix()([RewardSample(question, f"{reasoning}</think>The answer is 12.{stop}")])[0]

    assert scored("5 + 3 = 8\n8 * 2 = 16\n16 - 4 = 12") == 1.0
    assert scored("5 + 3 = 8\n8 * 2 = 15\n15 - 4 = 11") == pytest.approx(1 / 3)
    assert scored("5 + 3 = 9\n9 * 2 = 18\n16 - 4 = 12") == 0.0  # right later steps after a wrong one earn nothing
    assert scored("8 * 2 = 16\n16 - 4 = 12") == 0.0  # a skipped step
    assert scored("5 + 3 = 8\n8 * 2 = 16\n16 - 4 = 12", stop="") == 0.0  # never stopped
    not_arith = RewardSample(({"role": "user", "content": "Hi."},), "x</think>y<|user|>")
    assert ArithStepPrefix()([not_arith]) == [None]


def test_reference_steps_are_the_suites_own_worked_steps():
    for problem in arith.generate(40, seed=11):
        assert arith.worked_steps(problem.expression) == list(problem.steps)


def test_modules_load_by_dotted_path_in_either_spelling():
    assert isinstance(load_reward_module("rewards.verifiers.ArithExactMatch"), ArithExactMatch)
    assert isinstance(load_reward_module("rewards.verifiers:FormatValid"), FormatValid)
    assert load_reward_module("tests.test_rewards:Returns", {"scores": [1.0]}).scores == [1.0]
    with pytest.raises(RewardModuleError, match="'rewards.nowhere.Thing' cannot be imported"):
        load_reward_module("rewards.nowhere.Thing")
    with pytest.raises(RewardModuleError, match="'tests.test_rewards.PI' is not a RewardModule"):
        load_reward_module("tests.test_rewards.PI")


PI = 3.14159  # importable from an allowed package, and not a reward module
BUILT: list[str] = []


class Recorder:
    """Has the Protocol's attributes but no `__call__`: not a reward module, so never built."""

    name, version = "recorder", "1"

    def __init__(self, **params):
        BUILT.append("built")


def test_only_reward_modules_from_allowed_origins_are_ever_built(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path, params in [("subprocess.Popen", {"args": ["touch", "pwned"]}), ("os:system", {}),
                         ("builtins.eval", {}), ("subprocess.run", {})]:
        with pytest.raises(RewardModuleError, match="not from an allowed origin.*nothing was imported"):
            load_reward_module(path, params)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(RewardModuleError, match="does not declare itself a reward module.*not constructed"):
        load_reward_module("tests.test_rewards.Recorder", {"x": 1})
    assert BUILT == []
    with pytest.raises(RewardModuleError, match="not a dotted path"):
        load_reward_module("Popen")


def test_the_operator_allow_lists_further_packages(monkeypatch):
    monkeypatch.setenv("POSTTRAIN_REWARD_PACKAGES", "")
    with pytest.raises(RewardModuleError, match="not from an allowed origin"):
        load_reward_module("tests.test_rewards:Returns", {"scores": [1.0]})
    monkeypatch.setenv("POSTTRAIN_REWARD_PACKAGES", "elsewhere, tests.test_rewards")
    assert load_reward_module("tests.test_rewards:Returns", {"scores": [1.0]}).scores == [1.0]


def test_lineage_records_the_source_digest_of_the_module():
    ref = reward_module_ref("rewards.verifiers.ArithExactMatch", ArithExactMatch())
    assert ref.source_sha256 == hashlib.sha256(Path(rewards.verifiers.__file__).read_bytes()).hexdigest()
    assert ref.params["name"] == "arith_exact_match"


@pytest.mark.parametrize("module,message", [
    (Raises(), r"'raises' \(version 1\) raised KeyError"),
    (Hangs(), r"'hangs' \(version 1\) did not return within 0.2 s"),
    (Returns([1.0]), r"'returns' \(version 1\) returned 1 scores for 2 samples"),
    (Returns([1.0, math.nan]), r"returned nan for sample 1"),
    (Returns([math.inf, 1.0]), r"returned inf for sample 0"),
    (Returns(["1", 1.0]), r"returned '1' \(str\) for sample 0"),
    (Returns([True, 0.0]), r"returned True \(bool\) for sample 0: scores must be floats"),
    (Returns([1e308, 0.0]), r"returned 1e\+308 for sample 0: scores must be finite and within ±1e\+06"),
])
def test_a_misbehaving_module_fails_the_batch_naming_itself(module, message):
    with pytest.raises(RewardModuleError, match=message):
        score_batch(module, [sample("a"), sample("b")], timeout_s=0.2)


def test_none_passes_through_as_unscorable():
    assert score_batch(Returns([None, 1]), [sample("a"), sample("b")]) == [None, 1.0]
