"""The general RL job end to end on the tiny model: prompt@1 instruct prompts, the mixed reward, lineage."""

import tempfile
from pathlib import Path

import pytest

from data_contracts import PROMPT_V1
from data_prep.prepare import publish_prompts
from infra.rollouts import recorded_shards
from infra.store import open_store
from model.tokenizer import load_tokenizer
from stages.common.inputs import load_split
from stages.common.prompts import general_prompts
from stages.grpo.config import GeneralRlConfig
from suites import instruct
from suites.prepare import SuiteSizes
from tests.stage_jobs import run_stage_job


def published_prompts(small_store, suite: str):
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        dataset, _ = publish_prompts(store, suite, SuiteSizes(40, 8), 0, Path(workdir), "tests")
    return dataset


@pytest.fixture(scope="module")
def instruct_prompts(small_store):
    return published_prompts(small_store, "instruct")


def test_prompt_rows_carry_their_domain_and_rules_to_the_reward(small_store, instruct_prompts, tmp_path):
    tokenizer = load_tokenizer(open_store(small_store["root"]).open(small_store["init"]).download(tmp_path / "init"))
    prompts = general_prompts(load_split([instruct_prompts], "train", tmp_path, PROMPT_V1), tokenizer)
    assert len(prompts) == 40
    first = prompts[0]
    assert first.metadata["domain"] == "instruct" and first.metadata["constraints"]
    assert first.messages[-1]["role"] == "user"
    # The reference is a reply that meets every constraint: the anchor of a GRM or an anchor member.
    assert all(instruct.check(constraint, first.reference) for constraint in first.metadata["constraints"])
    assert tokenizer.decode(first.prompt_ids).endswith("<|assistant|><think>")


def test_general_rl_trains_on_prompts_and_records_every_mixed_module_in_lineage(small_store, instruct_prompts, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = GeneralRlConfig(run_id="general-steps", store=small_store["root"], init_checkpoint=small_store["init"],
                             datasets=[instruct_prompts.uri], group_size=2, prompts_per_step=2, max_steps=2,
                             sampling={"max_new_tokens": 12}, optimizer={"warmup_steps": 1},
                             # The untrained model's replies rarely differ in reward: train on them as drawn.
                             dynamic_sampling={"enabled": False})
    steps = [e for e in run_stage_job("stages.grpo.general", config, tmp_path) if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all("reward/mixed" in s and s["dropped_groups"] == 0 for s in steps)  # every instruct sample scored
    # The engine and the trainer (same weights, fp32) route each token to the same experts.
    assert all(s["routing_agreement"] >= 0.99 for s in steps)
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    refs = {ref["path"]: ref for ref in lineage["reward_modules"]}
    assert set(refs) == {"rewards.mix.MixedReward", "rewards.rules.InstructGate", "rewards.rules.InstructSoft"}
    assert all(len(ref["source_sha256"]) == 64 for ref in refs.values())
    assert [i["contract"] for i in lineage["inputs"] if i["role"] == "data"] == [PROMPT_V1.id]
    assert {i["contract"] for i in lineage["inputs"] if i["role"] == "rollouts"} == {"rollout@1"}


def test_chat_prompts_train_with_the_orm_and_anchor_replies_as_off_policy_members(small_store, trained_orm, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    orm = {"path": "rewards.orm.OrmScore", "scale": "sigmoid",
           "params": {"checkpoint": trained_orm["checkpoint"], "store": trained_orm["root"]}}
    config = GeneralRlConfig(run_id="general-anchors", store=small_store["root"], init_checkpoint=small_store["init"],
                             datasets=[published_prompts(small_store, "chat").uri], group_size=3, prompts_per_step=2,
                             max_steps=2, sampling={"max_new_tokens": 12}, optimizer={"warmup_steps": 1},
                             anchors={"enabled": True}, routing_replay=True,
                             rewards=[{"path": "rewards.mix.MixedReward", "params": {"domains": {"chat": [orm]}}}])
    steps = [e for e in run_stage_job("stages.grpo.general", config, tmp_path) if e["event"] == "step"]
    # Every chat prompt has its anchor: one of the three seats of each of the two groups.
    assert [s["anchor_members"] for s in steps] == [2, 2]
    # The sampled members train through the engine's experts; an anchor, which no engine routed, through its own.
    assert all(s["routing_agreement"] >= 0.99 for s in steps)
    rows = [row for shard in recorded_shards(open_store(small_store["root"]).open(config.output_name))
            for row in shard.table().to_pylist()]
    assert [row["routed_experts"] is None for row in rows] == [row["anchor"] for row in rows]
    assert all(s["dropped_groups"] == 0 and 0 < s["reward/mixed"] < 1 for s in steps)
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    refs = {ref["path"]: ref for ref in lineage["reward_modules"]}
    assert set(refs) == {"rewards.mix.MixedReward", "rewards.orm.OrmScore"}
    assert refs["rewards.orm.OrmScore"]["params"]["checkpoint"] == trained_orm["checkpoint"]
    assert lineage["config"]["anchors"]["enabled"] is True
    # The ORM checkpoint is a parent of the trained policy: the auditor's DAG reaches the reward model.
    orm_uri = open_store(trained_orm["root"]).open(trained_orm["checkpoint"]).uri
    assert [(p["role"], p["uri"]) for p in lineage["parents"]] == [("init", lineage["parents"][0]["uri"]),
                                                                   ("reward_model", orm_uri)]
