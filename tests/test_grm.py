"""The GRM reward: the judge's request, reading its verdict, and a real engine's unparsable verdicts counted as None."""

import pytest

from rewards import RewardSample
from rewards.grm import GenerativeJudge, judge_request, verdict_score
from rollout.process import EngineProcess
from suites import judge

QUESTION = ({"role": "user", "content": "How do I keep basil alive?"},)
ANCHOR = "Water it when the soil is dry and give it six hours of sun."


def chat_sample(reply, reference=ANCHOR):
    return RewardSample(QUESTION, f"Answer.</think>{reply}<|user|>", reference, {"domain": "chat"})


@pytest.fixture(scope="module")
def judge_engine(small_store, tmp_path_factory):
    with EngineProcess(small_store["init"], tmp_path_factory.mktemp("judge") / "engine.log") as client:
        yield client


def test_the_request_is_the_judge_suites_own_with_the_anchor_as_reference():
    (message,) = judge_request(chat_sample("Sun and water."))
    assert message["content"] == judge.REQUEST.format(question=QUESTION[0]["content"], reference=ANCHOR,
                                                      reply="Sun and water.")


@pytest.mark.parametrize(("verdict", "score"), [
    ("Compare the reply with the reference: close.</think>Score: 7\nRationale: Good.<|user|>", 7),
    ("Compare.</think>Score: 10\nRationale: Full.<|user|>", 10),
    ("Compare.</think>Score: 11\nRationale: Off the scale.<|user|>", None),
    ("Compare.</think>It is quite good.<|user|>", None),
    ("Score: 7\nRationale: no reasoning closed.<|user|>", None),
    ("Compare.</think>Score: 7", None),  # never finished its turn
])
def test_a_verdict_is_read_only_from_a_well_formed_score_line(verdict, score):
    assert verdict_score(verdict) == score


def test_unparsable_verdicts_from_a_real_engine_are_none_and_counted(small_store, judge_engine):
    grm = GenerativeJudge(small_store["init"], judge_engine.base_url, max_new_tokens=16, store=small_store["root"])
    samples = [chat_sample("Sun and water."), chat_sample("No idea."), chat_sample("x", reference=None)]
    # An untrained judge writes no score line: every judged sample is None, none is given a number.
    assert grm(samples) == [None, None, None]
    assert (grm.judged, grm.unparsable) == (2, 2)  # the sample without an anchor was not sent to the judge
