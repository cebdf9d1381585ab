"""Dynamic sampling: a group whose rewards are all equal is never trained on, read back from the rollout
record, in the synchronous GRPO loop (a step draws again for the groups it misses, at most `max_draws`
times) and in asynchronous agentic RL (the trainer takes finished groups with signal, up to a cap; there with
online difficulty on, every group taken rating its prompt: tests/test_difficulty.py)."""

import collections
import random
from pathlib import Path

import torch
from safetensors.torch import load_file

from infra.rollouts import recorded_shards
from infra.store import open_store
from rollout.agents.envs.tasks import CalcTask
from tests.test_agentic_rl import agentic_config
from tests.test_agentic_rl import run_job as run_agentic_job
from tests.test_reasoning_rl import rl_config, run_job


class EvenLength:
    """1 for a reply of even length: most groups of short truncated replies agree, some do not."""

    name, version = "even_length", "1"

    def __call__(self, samples):
        return [float(len(s.response) % 2 == 0) for s in samples]


class Constant:
    """The same score for every reply: no group ever carries signal."""

    name, version = "constant", "1"

    def __call__(self, samples):
        return [0.5] * len(samples)


class CoinTask:
    """The calc task whose episodes succeed at random (seeded per service): groups with and without spread,
    whatever the model."""

    name, tools = CalcTask.name, CalcTask.tools

    def __init__(self):
        self.calc, self.coin = CalcTask(), random.Random(0)

    def check_row(self, reference, metadata):
        self.calc.check_row(reference, metadata)

    def execute(self, call, episode):
        return self.calc.execute(call, episode)

    def succeeded(self, episode):
        return self.coin.random() < 0.5


class GradedFailureTask(CoinTask):
    """The calc task whose episodes all fail, each graded with a random partial credit (seeded per service)."""

    def succeeded(self, episode):
        return False

    def partial_credit(self, episode):
        return self.coin.choice([0.0, 0.5, 1.0])


def steps_of(events):
    return [e for e in events if e["event"] == "step"]


def test_zero_spread_groups_are_never_trained_and_the_cap_on_draws_holds(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = rl_config(small_store, "dynamic-mixed", rewards=[{"path": "tests.test_dynamic_sampling:EvenLength"}],
                       prompts_per_step=4, max_steps=3, dynamic_sampling={"max_draws": 3})
    events, _ = run_job(config, tmp_path)
    steps = steps_of(events)
    assert [s["step"] for s in steps] == [1, 2, 3]
    for step in steps:
        assert 1 <= step["draws"] <= 3
        assert step["groups_trained"] <= min(step["groups_with_signal"], config.prompts_per_step)
        if step["groups_trained"] < config.prompts_per_step:  # short of groups with signal: only after the cap
            assert step["draws"] == 3
        assert step["groups_drawn"] >= step["groups_trained"]
    assert any(step["groups_with_signal"] < step["groups_drawn"] for step in steps)  # zero-spread groups were drawn

    rewards = groups_on_record(open_store(small_store["root"]).open(config.output_name))
    assert rewards and all(len(set(group)) > 1 for group in rewards.values())  # every trained group has spread
    assert sum(map(len, rewards.values())) == config.group_size * sum(step["groups_trained"] for step in steps)


def test_a_step_without_any_group_with_signal_makes_no_update(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = rl_config(small_store, "dynamic-none", rewards=[{"path": "tests.test_dynamic_sampling:Constant"}],
                       max_steps=2, dynamic_sampling={"max_draws": 2})
    events, _ = run_job(config, tmp_path)
    steps = steps_of(events)
    assert [(s["draws"], s["groups_drawn"], s["groups_with_signal"], s["groups_trained"], s["updated"])
            for s in steps] == [(2, 4, 0, 0, 0)] * 2
    store = open_store(small_store["root"])
    committed = store.open(config.output_name)
    assert recorded_shards(committed) == []  # nothing trained, nothing on record
    before = load_file(Path(store.open(small_store["init"]).download(tmp_path / "init")) / "model.safetensors")
    after = load_file(Path(committed.download(tmp_path / "out")) / "model.safetensors")
    assert all(torch.equal(before[name], after[name]) for name in before)


def groups_on_record(committed) -> dict[str, list[float]]:
    rewards = collections.defaultdict(list)
    for shard in recorded_shards(committed):
        for row in shard.table().to_pylist():
            rewards[row["group_id"]].append(row["reward"])
    return rewards


def test_asynchronous_agentic_rl_trains_only_groups_with_signal_and_rates_every_group_taken(small_store, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = agentic_config(small_store, "dynamic-agentic", tasks={"tests.test_dynamic_sampling:CoinTask": 1.0},
                            engines={"replicas": 1}, max_steps=3, dynamic_sampling={"max_draws": 3},
                            difficulty={"enabled": True})
    events = run_agentic_job(config, tmp_path)
    steps = steps_of(events)
    assert [s["step"] for s in steps] == [1, 2, 3]
    for step in steps:
        assert step["groups_drawn"] <= 3 * config.groups_per_step
        assert step["groups_trained"] == step["groups_with_signal"] <= config.groups_per_step
        assert step["groups_drawn"] == step["groups_trained"] + step["groups_no_signal"] + step["groups_dropped"]
        assert step["drawn_outside_band"] <= step["groups_drawn"]
    assert sum(step["groups_no_signal"] for step in steps) > 0  # zero-spread groups came, and were passed over
    # Every group taken rated its prompt, those passed over too: a coin's zero-spread group is outside the band.
    tracked = [step["difficulty_tracked"] for step in steps]
    assert tracked == sorted(tracked) and 0 < tracked[-1] <= sum(step["groups_drawn"] for step in steps)
    assert steps[-1]["difficulty_outside_band"] > 0
    rewards = groups_on_record(open_store(small_store["root"]).open(config.output_name))
    assert rewards and all(len(set(group)) > 1 for group in rewards.values())


def test_partial_credit_gives_failed_groups_signal_and_both_parts_go_on_record(small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = "tests.test_dynamic_sampling:GradedFailureTask"
    config = agentic_config(small_store, "partial-credit", tasks={task: 1.0},
                            engines={"replicas": 1}, max_steps=2, partial_credit_weight=0.5)
    steps = steps_of(run_agentic_job(config, tmp_path))
    # Every episode failed: without the credit no group would have signal, and no step would update.
    assert len(steps) == 2 and all(step["groups_trained"] > 0 and "updated" not in step for step in steps)
    assert all(step[f"success/{task}"] == 0.0 and 0 < step["reward_mean"] <= 0.5 for step in steps)
    rows = [row for shard in recorded_shards(open_store(small_store["root"]).open(config.output_name))
            for row in shard.table().to_pylist()]
    assert rows
    for row in rows:
        parts = {part["module"]: part["score"] for part in row["reward_scores"]}
        assert parts[f"{task}/success"] == 0.0 and row["reward"] == 0.5 * parts[f"{task}/partial_credit"]
