"""bench/learning.py: its statistics on known numbers, and one bench of two arms end to end on the smoke preset."""

import json
import math
import os

import pytest

from flows.spec import preset_path
from infra.store import open_store
from posttrain.learning_bench import SANITY_COLUMNS, main
from posttrain.learning_runs import with_overrides
from posttrain.learning_stats import mean_interval, paired_differences, t_quantile


def test_t_quantiles_are_students():
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)


def test_the_interval_is_the_mean_plus_minus_t_standard_errors():
    # Mean 2, standard deviation 1, standard error 1/√3; t(0.975, 2 df) = 4.30265: half-width 2.48414.
    interval = mean_interval([1.0, 2.0, 3.0])
    assert (interval.mean, interval.n, interval.df) == (2.0, 3, 2)
    assert (interval.lo, interval.hi) == (pytest.approx(-0.48414, abs=1e-5), pytest.approx(4.48414, abs=1e-5))


def test_one_value_has_a_mean_and_no_interval():
    interval = mean_interval([5.0])
    assert (interval.mean, interval.lo, interval.hi) == (5.0, None, None)


def test_the_paired_difference_is_b_minus_a_on_each_seed():
    differences = paired_differences({0: 1.0, 1: 2.0, 2: 3.0}, {2: 3.0, 0: 2.0, 1: 4.0})
    assert differences == {0: 1.0, 1: 2.0, 2: 0.0}
    interval = mean_interval(list(differences.values()))
    assert (interval.mean, interval.lo, interval.hi) == (1.0, pytest.approx(-1.48414, abs=1e-5),
                                                         pytest.approx(3.48414, abs=1e-5))
    with pytest.raises(ValueError, match="different seeds"):
        paired_differences({0: 1.0, 1: 2.0}, {0: 1.0})


def test_overrides_set_dotted_keys_and_refuse_a_key_that_names_no_field():
    fields = {"max_steps": 26, "dynamic_sampling": {"enabled": True, "max_draws": 4}}
    assert with_overrides(fields, {"dynamic_sampling.enabled": False, "max_steps": 3}) == {
        "max_steps": 3, "dynamic_sampling": {"enabled": False, "max_draws": 4}}
    assert fields["dynamic_sampling"]["enabled"] is True  # the pipeline's config stays for the other arm
    with pytest.raises(ValueError, match="dynamic_sampling.enable: no such field"):
        with_overrides(fields, {"dynamic_sampling.enable": False})
    with pytest.raises(ValueError, match="max_steps.value: max_steps is not a section"):
        with_overrides(fields, {"max_steps.value": 1})


@pytest.mark.slow
def test_two_arms_on_the_same_seeds_of_the_smoke_preset(tmp_path, capsys):
    """Reasoning RL from the smoke store's initial model (the bench prepares the store's data and initial
    checkpoint as the pipeline does; a smoke store has no SFT checkpoint), 2 seeds, two steps each, the smoke
    config against one with dynamic sampling off; every run's lr set to 1e-4 for both arms."""
    out, store = tmp_path / "learning.json", str(tmp_path / "store")
    workdir = os.environ.get("POSTTRAIN_WORKDIR")
    main(["--store", store, "--spec", str(preset_path("smoke")), "--stage", "reasoning_rl",
          "--checkpoint", "init:latest", "--seeds", "2", "--set", "optimizer.lr=1e-4",
          "--compare", "dynamic_sampling.enabled=false", "--out", str(out)])
    result = json.loads(out.read_text())

    assert result["metric"] == "arith/accuracy_sampled" and result["seeds"] == [0, 1]
    assert result["command"].startswith("bench/learning.py --store") and len(result["code"]["git_sha"]) == 40
    for arm in ("A", "B"):
        recorded = result["arms"][arm]
        assert recorded["config"]["optimizer"]["lr"] == 1e-4
        assert [run["seed"] for run in recorded["runs"]] == [0, 1]
        for run in recorded["runs"]:
            assert run["before"] == result["before"] and 0 <= run["after"] <= 1
            assert run["gain_points"] == pytest.approx(100 * (run["after"] - run["before"]))
            assert run["sanity"]["steps"] == 2
            assert all(math.isfinite(run["sanity"][figure]) for figure in SANITY_COLUMNS), run["sanity"]
            assert f"/bench/{result['bench_id']}-{arm}-s{run['seed']}" in run["checkpoint"]
        assert math.isfinite(recorded["mean_gain_points"]["lo"]) and recorded["mean_gain_points"]["df"] == 1
    assert result["arms"]["B"]["config"]["dynamic_sampling"]["enabled"] is False

    gains = {arm: {run["seed"]: run["gain_points"] for run in result["arms"][arm]["runs"]} for arm in ("A", "B")}
    paired = result["paired"]
    assert paired["differences_points"] == {str(seed): pytest.approx(gains["B"][seed] - gains["A"][seed])
                                            for seed in (0, 1)}
    assert paired["mean_points"]["mean"] == pytest.approx(sum(paired["differences_points"].values()) / 2)

    printed = capsys.readouterr().out
    finished = [line.split(":")[0] for line in printed.splitlines() if ", after " in line]
    assert finished == ["A s0", "B s0", "A s1", "B s1"]  # the arms alternate per seed
    assert "mean gain" in printed and "95% CI" in printed and "B - A: mean difference" in printed
    # The pipeline's names are left alone, and so is the test session's scratch setting.
    assert open_store(store).list_committed("checkpoints/reasoning_rl/") == []
    assert os.environ.get("POSTTRAIN_WORKDIR") == workdir
