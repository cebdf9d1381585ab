"""The agentic RL job end to end on the tiny model: engine replicas, task services, async training."""

import os
import signal
import subprocess
import sys

from infra.launch import run_stage_job
from infra.launchers.local import LocalLaunch
from infra.rollouts import recorded_shards
from infra.store import open_store
from stages.agentic.config import AgenticRlConfig
from stages.common.events import parse_event
from tests.rollout_checks import check_advantages


def agentic_config(store, run_id, **overrides):
    fields = dict(run_id=run_id, store=store["root"], init_checkpoint=store["init"], datasets=store["datasets"],
                  group_size=2, groups_per_step=2, max_steps=3, sampling={"max_new_tokens": 16},
                  episode={"max_turns": 2, "max_context": 512, "discard_above": 480}, engines={"replicas": 2},
                  optimizer={"lr": 1e-3, "warmup_steps": 1}, max_in_flight_groups=4,
                  # The untrained model's groups all fail alike: these tests train on them to check the machinery
                  # (tests/test_dynamic_sampling.py checks that a zero-spread group is otherwise never trained).
                  dynamic_sampling={"enabled": False})
    fields.update(overrides)
    return AgenticRlConfig(**fields)


def run_job(config, tmp_path):
    path = tmp_path / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    events = []
    run_stage_job(LocalLaunch(nproc=1, threads_per_proc=1),
        "stages.agentic.train", path, lambda line: events.append(e) if (e := parse_event(line)) else None)
    return events


def test_async_steps_train_on_finished_groups_and_push_weights_to_every_replica(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Replaying the engines' experts, which come back past SGLang's router (rollout/fleet.py); the engines speculate
    # with the MTP layer's drafts.
    config = agentic_config(small_store, "agentic-steps", routing_replay=True,
                            engines={"replicas": 2, "speculative_steps": 2})
    events = run_job(config, tmp_path)

    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3] and [s["weight_version"] for s in steps] == [1, 2, 3]
    for step in steps:
        assert step["trained_tokens"] > 0 and step["samples_per_s"] > 0
        for key in ("reward_mean", "is_masked_fraction", "staleness", "env_failures", "stale_dropped"):
            assert key in step
        # Both replicas served rollouts; the router kept every rollout on one replica.
        assert len(step["replicas"]["requests"]) == 2 and step["replicas"]["removals"] == 0
        # The trainer's own routing against the engines' (older weights, asynchronous), measured under replay too.
        assert 0 < step["routing_agreement"] <= 1
        # Tokens per verification step: 1 + the drafts that stood.
        assert 1 <= step["spec_accept_length"] <= 3
    # Generation ran ahead of training: later steps trained on samples from older weights.
    assert any(int(age) > 0 for step in steps[1:] for age in step["staleness"])
    done = next(e for e in events if e["event"] == "done")
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    assert done["checkpoint"].endswith(config.output_name) and lineage["parents"][0]["uri"] == small_store["init"]
    assert lineage["config"]["tasks"] == {"search": 1.0, "calc": 1.0}
    # Every trained segment is on record with its rollout's centred advantage and how stale it was.
    shards = recorded_shards(open_store(small_store["root"]).open(config.output_name))
    assert [shard.step for shard in shards] == [1, 2, 3]
    rows = [row for shard in shards for row in shard.table().to_pylist()]
    check_advantages(rows, lambda rewards: rewards - rewards.mean())
    for step, shard in zip(steps, shards, strict=True):
        table = shard.table().to_pylist()
        assert step["recorded_samples"] == len(table) >= config.groups_per_step * config.group_size
        ages = {str(age): sum(1 for row in table if row["staleness"] == age) for age in {row["staleness"] for row in table}}
        assert set(ages) == set(step["staleness"])  # the same ages the step reported
    assert all(row["turn_starts"] and row["turn_starts"][0] == 0 and row["task"] in ("search", "calc") for row in rows)
    assert all(row["t_start"] is not None and len(row["old_logprobs"]) == len(row["response_ids"]) for row in rows)
    assert all(row["routed_experts"] is not None for row in rows)  # the experts each segment trained through


def test_sigkill_then_rerun_resumes_from_the_last_committed_step_with_its_weights_on_the_replicas(small_store, tmp_path):
    config = agentic_config(small_store, "agentic-killed", max_steps=4, checkpoint_every=2)
    path = tmp_path / "run.json"
    path.write_text(config.model_dump_json())
    env = LocalLaunch(nproc=1, threads_per_proc=1).environment()
    # Its own session, so the kill takes the engine replicas and task services down with the trainer.
    process = subprocess.Popen([sys.executable, "-m", "stages.agentic.train", "--config", str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True)
    for line in process.stdout:  # the step-2 commit is made; kill on the way to the next
        event = parse_event(line)
        if event and event["event"] == "step" and event["step"] == 3:
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.wait()
    store = open_store(small_store["root"])
    assert store.list_committed(config.resume_prefix) == [config.resume_prefix + "step-000002"]
    assert not store.is_committed(config.output_name)

    events = run_job(config, tmp_path)
    assert next(e for e in events if e["event"] == "resumed")["step"] == 2
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [3, 4] and [s["weight_version"] for s in steps] == [3, 4]
    # The replicas served the resumed weights (version 2) from the first rollout: nothing older was trained on.
    assert set(steps[0]["staleness"]) == {"0"}
    done = next(e for e in events if e["event"] == "done")
    assert done["resumed_from"].endswith("step-000002") and store.is_committed(config.output_name)
    # The record lists each step once: steps 1-2 as the killed run wrote them, 3-4 as the rerun trained them.
    shards = recorded_shards(store.open(config.output_name))
    assert [shard.step for shard in shards] == [1, 2, 3, 4] and len({s.artifact.uri for s in shards}) == 4
    resumed = recorded_shards(store.open(config.resume_prefix + "step-000002"))
    assert [s.artifact.uri for s in shards[:2]] == [s.artifact.uri for s in resumed]
    assert [len(shard.table()) for shard in shards[2:]] == [s["recorded_samples"] for s in steps]
