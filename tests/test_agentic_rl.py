"""The agentic RL job end to end on the tiny model: engine replicas, task services, async training."""

from infra.launch import LocalLauncher
from infra.store import open_store
from stages.agentic_rl_config import AgenticRlConfig
from stages.events import parse_event


def agentic_config(store, run_id, **overrides):
    fields = dict(run_id=run_id, store=store["root"], init_checkpoint=store["init"], datasets=store["datasets"],
                  group_size=2, groups_per_step=2, max_steps=3, max_new_tokens=16, max_turns=2, max_context=512,
                  discard_above=480, replicas=2, lr=1e-3, warmup_steps=1, max_in_flight_groups=4)
    fields.update(overrides)
    return AgenticRlConfig(**fields)


def run_job(config, tmp_path):
    path = tmp_path / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    events = []
    LocalLauncher(nproc=1, threads_per_proc=1).run(
        "stages.agentic_rl", path, lambda line: events.append(e) if (e := parse_event(line)) else None)
    return events


def test_async_steps_train_on_finished_groups_and_push_weights_to_every_replica(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = agentic_config(small_store, "agentic-steps")
    events = run_job(config, tmp_path)

    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3] and [s["weight_version"] for s in steps] == [1, 2, 3]
    for step in steps:
        assert step["trained_tokens"] > 0 and step["samples_per_s"] > 0
        for key in ("reward_mean", "is_masked_fraction", "staleness", "env_failures", "stale_dropped"):
            assert key in step
        # Both replicas served rollouts; the router kept every rollout on one replica.
        assert len(step["replicas"]["requests"]) == 2 and step["replicas"]["removals"] == 0
    # Generation ran ahead of training: later steps trained on samples from older weights.
    assert any(int(age) > 0 for step in steps[1:] for age in step["staleness"])
    done = next(e for e in events if e["event"] == "done")
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    assert done["checkpoint"].endswith(config.output_name) and lineage["parents"][0]["uri"] == small_store["init"]
    assert lineage["config"]["tasks"] == {"search": 1.0, "calc": 1.0}
