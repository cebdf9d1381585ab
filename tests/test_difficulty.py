"""Online difficulty: each prompt's running pass rate, and prompts always or never solved drawn less — the tracker
on its own, the GRPO sampler's and the agentic producer's draws by it, and reasoning RL end to end: fewer draws
of prompts without signal than without it, and a resumed run that draws as the interrupted one did."""

import json
import os
import random
import signal
import subprocess
import sys
import zlib

import pytest
import torch
from pydantic import ValidationError

from data_prep.prepare import publish_suite
from infra.launchers.local import LocalLaunch
from infra.store import open_store
from rollout.agents.orchestrator import RolloutResult, RolloutSpec
from rollout.agents.registry import TaskRegistry
from stages.agentic.config import AgenticRlConfig
from stages.agentic.groups import rollout_passes
from stages.agentic.rollouts import RolloutProducer
from stages.common.config import DifficultySettings
from stages.common.difficulty import Observation, PassRates, difficulty_metrics, observe_everywhere
from stages.common.distributed import Dist
from stages.common.events import parse_event
from stages.common.prompts import RlPrompt
from stages.grpo.config import ReasoningRlConfig
from stages.grpo.loop import GroupSampler
from stages.grpo.rewards import GroupRewards, group_passes
from suites.prepare import SuiteSizes
from tests.test_reasoning_rl import rl_config, run_job

IO = dict(run_id="r", init_checkpoint="checkpoints/init", datasets=["datasets/d"])
ON = DifficultySettings(enabled=True)


def test_a_prompt_outside_the_band_weighs_outside_weight_once_min_samples_are_seen():
    rates = PassRates(DifficultySettings(enabled=True, outside_weight=0.25, min_samples=4), group_size=8)
    rates.update("always", 4, 4)
    rates.update("sometimes", 1, 4)
    rates.update("never-once", 0, 2)  # 2 samples of the 4 it takes to count
    assert [rates.weight(p) for p in ("always", "sometimes", "never-once", "unseen")] == [0.25, 1.0, 1.0, 1.0]
    assert rates.rate("never-once") is None and rates.rate("unseen") is None
    rates.update("never-once", 0, 2)
    assert rates.rate("never-once") == 0.0 and rates.weight("never-once") == 0.25
    assert rates.counts() == {"difficulty_tracked": 3, "difficulty_outside_band": 2}
    banded = PassRates(DifficultySettings(enabled=True, band={"low": 0.2, "high": 0.5}), group_size=4)
    for prompt, passes in (("low", 0), ("edge", 2), ("inside", 1), ("high", 3)):
        banded.update(prompt, passes, 4)
    # An open interval: 0.25 is inside; 0, 0.5 (its edge) and 0.75 are not.
    assert [banded.outside_band(p) for p in ("low", "edge", "inside", "high")] == [True, True, False, True]


def test_the_rate_runs_weighing_earlier_groups_by_decay():
    rates = PassRates(ON, group_size=4)  # decay 0.5
    rates.update("p", 4, 4)
    assert rates.rate("p") == 1.0 and rates.outside_band("p")
    rates.update("p", 0, 4)  # (0.5·4 + 0) / (0.5·4 + 4)
    assert rates.rate("p") == pytest.approx(1 / 3) and not rates.outside_band("p")
    latest_only = PassRates(DifficultySettings(enabled=True, decay=0.0), group_size=4)
    latest_only.update("p", 4, 4)
    latest_only.update("p", 0, 4)
    assert latest_only.rate("p") == 0.0
    rates.update("p", 0, 0)  # a group none of whose samples could be scored tells nothing
    assert rates.rate("p") == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="prompt p: 5 passes of 4 samples"):
        rates.update("p", 5, 4)


def test_the_weighted_draw_is_distinct_seeded_and_draws_outside_prompts_by_their_weight():
    rates = PassRates(ON, group_size=4)
    prompts = [f"p{i}" for i in range(10)]
    for solved in prompts[:5]:
        rates.update(solved, 4, 4)
    whole = rates.draw(random.Random(7), prompts, 10, str)
    assert sorted(whole) == prompts  # without replacement
    assert rates.draw(random.Random(7), prompts, 4, str) == whole[:4]  # same rng, same rates: the same list
    assert rates.draw(random.Random(8), prompts, 4, str) != whole[:4]
    rng = random.Random(0)
    firsts = [rates.draw(rng, prompts, 1, str)[0] for _ in range(4000)]
    outside = sum(first in prompts[:5] for first in firsts) / len(firsts)
    assert outside == pytest.approx(0.5 / 5.5, abs=0.02)  # 5 prompts of weight 0.1 against 5 of weight 1
    with pytest.raises(ValueError, match="cannot draw 11 distinct prompts from 10"):
        rates.draw(rng, prompts, 11, str)


def test_the_state_survives_json_and_restores_the_same_rates():
    rates = PassRates(ON, group_size=2)
    for prompt, passes in (("a", 2), ("b", 1), ("a", 0)):
        rates.update(prompt, passes, 2)
    again = PassRates(ON, group_size=2)
    again.restore(json.loads(json.dumps(rates.state())))
    assert again.state() == rates.state() and again.counts() == rates.counts()
    assert [again.rate(p) for p in "ab"] == [rates.rate(p) for p in "ab"]
    observe_everywhere(again, [Observation("c", 0, 2)])  # one process: its own observations
    assert again.rate("c") == 0.0
    assert difficulty_metrics(again, 3) == {"difficulty_tracked": 3, "difficulty_outside_band": 1,
                                            "drawn_outside_band": 3}
    assert difficulty_metrics(None, 3) == {}


@pytest.mark.parametrize(("settings", "field"), [
    ({"band": {"low": 0.6, "high": 0.4}}, "band.low 0.6 must be below band.high 0.4"),
    ({"band": {"low": 0.5, "high": 0.5}}, "band.low 0.5 must be below band.high 0.5"),
    ({"band": {"high": 1.5}}, "difficulty.band.high"),
    ({"outside_weight": 0}, "difficulty.outside_weight"),
    ({"outside_weight": 2}, "difficulty.outside_weight"),
    ({"decay": 1}, "difficulty.decay"),
    ({"min_samples": 0}, "difficulty.min_samples"),
    ({"solved_at": float("nan")}, "difficulty.solved_at"),
    ({"window": 4}, "difficulty.window"),
])
def test_a_wrong_setting_is_refused_naming_its_field(settings, field):
    for config in (ReasoningRlConfig, AgenticRlConfig):
        with pytest.raises(ValidationError) as refused:
            config(**IO, difficulty=settings)
        assert field in str(refused.value)
    assert ReasoningRlConfig(**IO).difficulty == DifficultySettings() and not DifficultySettings().enabled


def rl_prompts(count: int) -> list[RlPrompt]:
    return [RlPrompt(f"p{i}", (), None, [1, 2]) for i in range(count)]


def test_the_grpo_sampler_draws_as_before_when_off_and_the_same_list_on_every_rank_when_on():
    config, prompts = ReasoningRlConfig(**IO), rl_prompts(12)

    def sampler(rank: int, world: int, seed: int, rates: PassRates | None) -> GroupSampler:
        return GroupSampler(config, None, [], None, prompts, random.Random(seed), Dist(rank, world, rank), False,
                            rates)

    assert sampler(0, 1, 3, None).draw(4) == random.Random(3).sample(prompts, 4)  # off: the numbers of old
    rates = PassRates(ON, group_size=4)
    for solved in prompts[:6]:
        rates.update(solved.id, 4, 4)
    shares = [sampler(rank, 2, 3, rates) for rank in (0, 1)]
    drawn = [s.draw(3) for s in shares]
    assert drawn[0] + drawn[1] == rates.draw(random.Random(3), prompts, 6, lambda p: p.id)
    outside = sum(p in prompts[:6] for p in drawn[0] + drawn[1])
    assert [s.difficulty_metrics()["drawn_outside_band"] for s in shares] == [outside, outside]  # whole draw


def test_a_groups_passes_leave_out_anchor_members_and_unscored_samples():
    scores = [[{"module": "m", "score": s}] for s in (1.0, 0.0, 1.0, None, 1.0, 1.0)]
    scored = GroupRewards(torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]), {}, [True, False], scores)
    anchors = torch.tensor([False, False, True, False, False, False])
    assert group_passes(scored, anchors, solved_at=1.0) == [(1, 2), (2, 2)]
    assert group_passes(scored, anchors, solved_at=0.5) == [(1, 2), (2, 2)]
    assert group_passes(scored, torch.zeros(6, dtype=torch.bool), solved_at=0.0) == [(3, 3), (2, 2)]


def rollout(reward: float | None, status: str = "ok") -> RolloutResult:
    return RolloutResult(RolloutSpec("r", "g", "calc", {"id": "p"}), [{}], reward, status)


def test_the_agentic_producer_draws_a_tasks_rows_by_the_pass_rates_and_a_group_counts_its_scored_rollouts():
    rows = [{"id": f"calc-{i}"} for i in range(10)]
    config = AgenticRlConfig(**IO, tasks={"calc": 1.0}, difficulty={"enabled": True})
    rates = PassRates(config.difficulty, config.group_size)
    for never in rows[:5]:
        rates.update(never["id"], 0, config.group_size)
    producer = RolloutProducer(config, None, {"calc": rows}, "", False, TaskRegistry({"calc": 1.0}), 0,
                               pass_rates=rates)
    uniform = RolloutProducer(config, None, {"calc": rows}, "", False, TaskRegistry({"calc": 1.0}), 0)
    try:
        drawn = [producer.next_row("calc")["id"] for _ in range(2000)]
        alike = [uniform.next_row("calc")["id"] for _ in range(2000)]
    finally:
        producer.loop.close()
        uniform.loop.close()
    never = {row["id"] for row in rows[:5]}
    assert sum(d in never for d in drawn) / len(drawn) == pytest.approx(0.5 / 5.5, abs=0.03)
    assert sum(d in never for d in alike) / len(alike) == pytest.approx(0.5, abs=0.05)
    crashed = rollout(None, "env_error")
    assert rollout_passes([rollout(1.0), rollout(0.0), crashed, rollout(0.0, "truncated")], 1.0) == (1, 3)


class SolvedByPromptClass:
    """Whatever the model writes, a quarter of the prompts are always solved, a quarter never, and the rest by a
    coin the reply's own text flips (by the prompt's and the reply's checksums)."""

    name, version = "solved_by_prompt_class", "1"

    def __call__(self, samples):
        return [solved(sample) for sample in samples]


def solved(sample) -> float:
    by_prompt = {0: 1.0, 1: 0.0}.get(zlib.crc32(sample.prompt[-1]["content"].encode()) % 4)
    return by_prompt if by_prompt is not None else float(zlib.crc32(sample.response.encode()) % 2)


def zero_spread_draws(steps: list[dict]) -> int:
    return sum(step["groups_drawn"] - step["groups_with_signal"] for step in steps)


def steps_of(events) -> list[dict]:
    return [e for e in events if e["event"] == "step"]


def test_reasoning_rl_draws_prompts_always_or_never_solved_less_and_a_resumed_run_draws_alike(
        small_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dataset, _ = publish_suite(open_store(small_store["root"]), "arith", SuiteSizes(15, 4), 0, tmp_path, "tests")
    fields = dict(datasets=[dataset.uri], rewards=[{"path": "tests.test_difficulty:SolvedByPromptClass"}],
                  group_size=8, prompts_per_step=5, max_steps=10, checkpoint_every=3, sampling={"max_new_tokens": 6},
                  dynamic_sampling={"max_draws": 1})  # one draw a step: every step draws 5 prompts
    uniform = steps_of(run_job(rl_config(small_store, "difficulty-off", **fields), tmp_path)[0])
    assert not [key for step in uniform for key in step if "band" in key or key.startswith("difficulty")]

    config = rl_config(small_store, "difficulty-on", difficulty={"enabled": True, "outside_weight": 0.02}, **fields)
    killed = run_until_step(config, tmp_path, 4)  # the step-3 commit holds the pass rates of steps 1-3
    resumed = steps_of(run_job(config, tmp_path)[0])
    assert [s["step"] for s in resumed] == list(range(4, 11))
    # The resumed run's step 4 drew what the killed run's did: the same prompts, rates and rewards.
    same = ("difficulty_tracked", "difficulty_outside_band", "drawn_outside_band", "groups_with_signal", "reward_mean")
    assert {key: resumed[0][key] for key in same} == {key: killed[3][key] for key in same}
    weighted = killed[:3] + resumed
    assert all(s["difficulty_tracked"] <= 15 and s["drawn_outside_band"] <= 5 for s in weighted)
    assert weighted[-1]["difficulty_outside_band"] > 0
    # Groups without signal (always or never solved) drawn in the later steps, once (nearly) every prompt has been
    # seen: about 8 in 15 draws uniformly, a few at most with difficulty on.
    later = slice(5, None)
    assert zero_spread_draws(weighted[later]) * 3 <= zero_spread_draws(uniform[later]), [
        [step["groups_drawn"] - step["groups_with_signal"] for step in run] for run in (weighted, uniform)]


def run_until_step(config, tmp_path, step: int) -> list[dict]:
    """The job's step records until `step`, then the job and its engine killed."""
    path = tmp_path / f"{config.run_id}.json"
    path.write_text(config.model_dump_json())
    # Its own session, so the kill takes the engine with the trainer.
    process = subprocess.Popen([sys.executable, "-m", "stages.grpo.reasoning", "--config", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=LocalLaunch(nproc=1, threads_per_proc=1).environment(), cwd=tmp_path,
                               start_new_session=True)
    steps = []
    for line in process.stdout:
        event = parse_event(line)
        if event and event["event"] == "step":
            steps.append(event)
            if event["step"] == step:
                os.killpg(process.pid, signal.SIGKILL)
                break
    process.wait()
    assert [s["step"] for s in steps] == list(range(1, step + 1)), "the job ended before the step"
    return steps
