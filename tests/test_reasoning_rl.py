"""The reasoning RL job end to end on the tiny model: a real engine process, DeepSpeed, the store."""

import json
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from infra.launch import StageFailed, run_stage_job
from infra.launchers.local import LocalLaunch
from infra.rollouts import SHARD_FILE, recorded_shards
from infra.store import open_store
from model.presets import build_model
from model.tokenizer import load_tokenizer
from posttrain.cli import app
from stages.common.events import parse_event
from stages.common.icepop_loss import group_advantages
from stages.common.policy import freeze_matching
from stages.grpo.config import ReasoningRlConfig
from tests.rollout_checks import check_advantages, check_scores


class ShortReplies:
    """Scores by response length, so that even an untrained model's groups carry a signal."""

    name, version = "short_replies", "1"

    def __call__(self, samples):
        return [1.0 / (1 + len(s.response)) for s in samples]


class Broken:
    name, version = "broken", "1"

    def __call__(self, samples):
        return [float("nan")] * len(samples)


def rl_config(store, run_id, **overrides):
    fields = dict(run_id=run_id, store=store["root"], init_checkpoint=store["init"],
                  datasets=[uri for uri in store["datasets"] if "/arith-" in uri], group_size=4, prompts_per_step=2,
                  max_steps=3, sampling={"max_new_tokens": 12}, optimizer={"lr": 1e-3, "warmup_steps": 1})
    fields.update(overrides)
    return ReasoningRlConfig(**fields)


def run_job(config, tmp_path):
    path = tmp_path / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    events, lines = [], []

    def collect(line):
        lines.append(line)
        if (event := parse_event(line)) is not None:
            events.append(event)

    run_stage_job(LocalLaunch(nproc=1, threads_per_proc=1), "stages.grpo.reasoning", path, collect)
    return events, lines


def test_on_policy_steps_push_weights_and_commit_with_the_reward_modules_in_lineage(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rewards = [{"path": "tests.test_reasoning_rl:ShortReplies"}, {"path": "rewards.verifiers.ArithExactMatch", "weight": 2.0}]
    # Two engines behind SGLang's router (one engine runs in the pipeline's smoke test and test_compute), replaying
    # their experts: SGLang's router drops return_routed_experts, so those requests go to the replicas directly.
    config = rl_config(small_store, "rl-steps", rewards=rewards, frozen=["*.mlp.gate.weight"], engines={"replicas": 2},
                       prompts_per_step=6, record={"show_every": 1, "show_samples": 2}, routing_replay=True)
    events, _ = run_job(config, tmp_path)

    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    # Each step samples from the weights the previous step produced, on every replica.
    assert [s["weight_version"] for s in steps] == ["0", "1", "2"]
    answered = steps[-1]["replicas"]  # one request per group, keyed by its prompt: both replicas served
    assert len(answered) == 2 and sum(answered.values()) == 3 * config.prompts_per_step
    for step in steps:
        assert step["zero_signal_group_fraction"] < 1 and step["dropped_groups"] == 0
        for key in ("reward/short_replies", "reward/arith_exact_match", "pop_masked_fraction",
                    "clip_fraction", "logp_gap_mean", "logp_gap_max", "response_length", "rollout_tokens_per_s"):
            assert key in step
        # Engine and trainer agree on the sampled tokens' logprobs (same weights, same sparse keys).
        assert step["logp_gap_max"] < 1e-3 and step["pop_masked_fraction"] == 0
        # The trainer's own routing (measured under replay too) is the engines' (same weights, fp32).
        assert step["routing_agreement"] >= 0.99

    done = next(e for e in events if e["event"] == "done")
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    paths = [ref["path"] for ref in lineage["reward_modules"]]
    assert done["checkpoint"].endswith(config.output_name) and paths == [r["path"] for r in rewards]
    assert all(len(ref["source_sha256"]) == 64 for ref in lineage["reward_modules"])
    assert lineage["parents"][0]["uri"] == small_store["init"]
    # The one checkpointer: every step's metrics travel with the checkpoint, as they do for SFT and the ORM.
    committed = open_store(small_store["root"]).open(config.output_name)
    records = [json.loads(line) for line in committed.read_bytes("metrics.jsonl").decode().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and records[-1]["loss"] == steps[-1]["loss"]
    # The MoE routers stayed as they were (`frozen`); the rest of the model trained.
    store = open_store(small_store["root"])
    before = load_file(Path(store.open(small_store["init"]).download(tmp_path / "init")) / "model.safetensors")
    after = load_file(Path(store.open(config.output_name).download(tmp_path / "out")) / "model.safetensors")
    routers = [name for name in before if name.endswith(".mlp.gate.weight")]
    assert routers and all(torch.equal(before[name], after[name]) for name in routers)
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    # The MTP layer kept up with the policy on the same samples (its own loss, `mtp.train` by default).
    assert all(step["mtp_loss"] > 0 for step in steps)
    assert not torch.equal(before["model.layers.3.eh_proj.weight"], after["model.layers.3.eh_proj.weight"])
    assert lineage["mtp"] == {"layers": 1, "trained": True, "depths": 3}

    # Every trained sample is on record, one shard per step, and the record is true.
    shards = recorded_shards(committed)
    assert [shard.step for shard in shards] == [1, 2, 3]
    rows = [row for shard in shards for row in shard.table().to_pylist()]  # each validated against rollout@1
    assert len(rows) == 3 * config.prompts_per_step * config.group_size == sum(s["recorded_samples"] for s in steps)
    assert all(s["recorded_bytes"] > 0 for s in steps)
    check_advantages(rows, lambda rewards: group_advantages(rewards.unsqueeze(0))[0])
    check_scores(rows, config.rewards, load_tokenizer(tmp_path / "out"))
    assert {row["weight_versions"][0] for row in rows} == {0, 1, 2} and {row["staleness"] for row in rows} == {0}
    assert all(row["masked_fraction"] == 0 and len(row["old_logprobs"]) == len(row["response_ids"]) for row in rows)
    assert all(row["routed_experts"] is not None for row in rows)  # the experts each sample trained through
    local = [shard.artifact.download(tmp_path / "shards" / str(shard.step)) / SHARD_FILE for shard in shards]
    loaded = datasets.load_dataset("parquet", data_files=[str(path) for path in local], split="train",
                                   cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == len(rows) and loaded[0]["reward_scores"] == rows[0]["reward_scores"]
    # Decoded samples went out while it trained, and `posttrain rollouts` shows them afterwards.
    shown = [e for e in events if e["event"] == "samples"]
    assert [e["step"] for e in shown] == [1, 2, 3] and all(len(e["samples"]) == 2 for e in shown)
    # Each table: as a person reads it, every reward module's score beside the reward.
    assert all(f"score {module}" in sample for e in shown for sample in e["samples"]
               for module in ("short_replies", "arith_exact_match"))
    assert not any("<|assistant|>" in sample["prompt"] for e in shown for sample in e["samples"])
    printed = CliRunner().invoke(app, ["rollouts", committed.uri, "--step", "2", "--limit", "3", "--format", "jsonl"])
    assert printed.exit_code == 0, printed.output
    samples = [json.loads(line) for line in printed.output.splitlines()]
    assert len(samples) == 3 and all(sample["step"] == 2 and sample["completion"] for sample in samples)
    table = CliRunner().invoke(app, ["rollouts", committed.uri, "--step", "2", "--limit", "2"]).output
    assert "assistant" in table and not any(token in table for token in ("<|user|>", "<|assistant|>", "[gMASK]"))
    ancestry = CliRunner().invoke(app, ["lineage", committed.uri, "--verify"])
    assert ancestry.exit_code == 0, ancestry.output
    assert "rollouts 72 samples of steps 1-3 in 3 shard(s)" in ancestry.output
    assert "all files of" in ancestry.output
    drawn = CliRunner().invoke(app, ["lineage", committed.uri, "--format", "mermaid"]).output
    assert '["rollouts: 72 samples of steps 1-3 in 3 shard(s)' in drawn and "-->|rollouts|" in drawn
    # An auditor's copy of the store: a byte flipped in one of its rollout shards is named there, in the copy.
    copy = tmp_path / "audit-copy"
    shutil.copytree(small_store["root"], copy)
    name = shards[1].artifact.uri.removeprefix(store.root_uri + "/")
    shard = copy / name / SHARD_FILE
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    audited = CliRunner().invoke(app, ["lineage", config.output_name, "--verify", "--store", str(copy)])
    assert audited.exit_code == 1 and f"{copy.as_uri()}/{name}/{SHARD_FILE}" in audited.stderr
    # `posttrain rollouts` reads the copy's samples too, never the original's.
    assert all(s.artifact.uri.startswith(copy.as_uri() + "/")
               for s in recorded_shards(open_store(str(copy)).open(config.output_name)))


def test_a_frozen_glob_that_matches_nothing_is_refused_naming_it(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    with pytest.raises(ValueError, match=r"'\*\.router\.weight' matches no parameter"):
        freeze_matching(model, ["*.mlp.gate.weight", "*.router.weight"])
    freeze_matching(model, ["*.mlp.gate.weight"])
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen and all(name.endswith(".mlp.gate.weight") for name in frozen)


def test_a_reward_module_returning_nan_fails_the_stage_naming_it(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = rl_config(small_store, "rl-broken", rewards=[{"path": "tests.test_reasoning_rl:Broken"}], max_steps=1)
    with pytest.raises(StageFailed) as failure:
        run_job(config, tmp_path)
    assert "reward module 'broken' (version 1) returned nan for sample 0" in str(failure.value)
