"""Reasoning RL on the embedded code suite: the stage reads its prompt rows (the hidden test calls are their
reference; its conversations only answer with a solution), the code verifier scores completions in the sandbox
while it trains (its engine speculating), and the held-out evaluation scores with the same verifier (`code/…`)."""

import tempfile
from pathlib import Path

import pytest

from data_contracts import CHAT_V1, PROMPT_V1
from data_prep.prepare import publish_prompts
from flows.prepare_data import prepare_data
from flows.spec import parse_spec
from infra.publish import published_contract, published_suite
from infra.store import open_store
from rewards.verifiers import CodeTests
from stages.evaluation.sampled import evaluate_sampled
from stages.evaluation.sampled_accuracy import verifier_for
from stages.evaluation.settings import SampledEvalSettings
from stages.grpo.config import ReasoningRlConfig
from suites.prepare import SuiteSizes
from tests.stage_jobs import run_stage_job

pytestmark = pytest.mark.usefixtures("bubblewrap")


def test_a_spec_gives_reasoning_rl_code_s_prompt_rows_and_arith_s_conversations(small_store, tmp_path):
    document = {"store": small_store["root"], "model": {"checkpoint": small_store["init"]},
                "data": {"suites": {"code": {"train": 8, "test": 2}, "arith": {"train": 8, "test": 2}}},
                "stages": {"reasoning_rl": {"datasets": ["code", "arith"]}}}
    prepared = prepare_data.fn(parse_spec(document, str(tmp_path / "spec.yaml")), tmp_path)
    store = open_store(small_store["root"])
    contracts = {published_suite(store.open(uri)): published_contract(store.open(uri))
                 for uri in prepared["stages"]["reasoning_rl"]}
    assert contracts == {"code": PROMPT_V1.id, "arith": CHAT_V1.id}


def test_reasoning_rl_on_code_is_scored_by_its_hidden_tests_in_training_and_evaluation(small_store, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        dataset, _ = publish_prompts(store, "code", SuiteSizes(16, 4), 0, Path(workdir), "tests")
    assert verifier_for("prompt", published_suite(dataset)) == ("code", CodeTests)
    config = ReasoningRlConfig(run_id="reasoning-code", store=small_store["root"], init_checkpoint=small_store["init"],
                               datasets=[dataset.uri], rewards=[{"path": "rewards.verifiers.CodeTests"}],
                               group_size=2, prompts_per_step=2, max_steps=2, sampling={"max_new_tokens": 12},
                               optimizer={"warmup_steps": 1}, dynamic_sampling={"enabled": False},
                               engines={"speculative_steps": 2})  # drafted by the MTP layer, verified by the model
    steps = [e for e in run_stage_job("stages.grpo.reasoning", config, tmp_path) if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2]
    # Every completion is the verifier's to score (its reference carries test calls): none dropped as unscored.
    assert all("reward/code_tests" in s and s["dropped_groups"] == 0 for s in steps)
    assert all(1 <= s["spec_accept_length"] <= 3 for s in steps)  # 1 + the drafts that stood
    trained = store.open(config.output_name)
    assert [ref["path"] for ref in trained.lineage()["reward_modules"]] == ["rewards.verifiers.CodeTests"]
    metrics = evaluate_sampled(store, trained.uri, dataset.uri,
                               SampledEvalSettings(prompts=4, samples_per_prompt=2, max_new_tokens=12, seed=0))
    assert set(metrics) == {"code/accuracy_greedy", "code/accuracy_sampled"}
    assert all(0.0 <= value <= 1.0 for value in metrics.values())
