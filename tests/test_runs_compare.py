"""`posttrain runs compare`: two stage runs side by side, each metric before (its init's evaluation) → after,
and only the settings in which they differ."""

import json

from typer.testing import CliRunner

from data_contracts.lineage import Lineage
from infra.publish import parent_ref, publish_directory
from infra.store import open_store
from posttrain.cli import app
from stages.evaluation.committed import committed_eval

SETTINGS = {"attention": ["sparse"], "limit_per_suite": 8}


def checkpoint(store, tmp_path, name, lineage):
    folder = tmp_path / name.replace("/", "-")
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return publish_directory(store, name, folder, lineage)


def evaluated(store, artifact, accuracy):
    def run(workdir):
        rows = [{"checkpoint_uri": artifact.uri, "suite": "arith", "metric": "accuracy@sparse", "split": "test",
                 "value": accuracy, "n": 8, "created_at": "2026-12-05T00:00:00+00:00"}]
        return {"sparse": {"arith/accuracy": accuracy}}, rows
    committed_eval(store, artifact, [], SETTINGS, 0, run)


def test_two_runs_show_before_and_after_and_the_settings_they_differ_in(tmp_path):
    store = open_store(str(tmp_path / "store"))
    init = checkpoint(store, tmp_path, "checkpoints/init/tiny", Lineage(kind="checkpoint", name="init"))
    evaluated(store, init, 0.1)
    for run_id, lr, accuracy in (("lr-low", 1e-5, 0.2), ("lr-high", 1e-4, 0.3)):
        config = {"run_id": run_id, "store": "elsewhere", "max_steps": 40, "optimizer": {"lr": lr, "warmup_steps": 5},
                  "engines": {"engine_urls": [f"http://127.0.0.1:{len(run_id)}0"], "replicas": 1}}
        trained = checkpoint(store, tmp_path, f"checkpoints/reasoning_rl/{run_id}", Lineage(
            kind="checkpoint", name=f"reasoning_rl {run_id} step 40", parents=[parent_ref(init, "init")], config=config))
        evaluated(store, trained, accuracy)

    shown = CliRunner().invoke(app, ["runs", "compare", "checkpoints/reasoning_rl/lr-low", "reasoning_rl:latest",
                                     "--store", str(tmp_path / "store"), "--json"])
    assert shown.exit_code == 0, shown.output
    compared = json.loads(shown.output)
    assert [(run["run_id"], run["before"], run["after"]) for run in compared["runs"]] == [
        ("lr-low", {"arith/accuracy@sparse": 0.1}, {"arith/accuracy@sparse": 0.2}),
        ("lr-high", {"arith/accuracy@sparse": 0.1}, {"arith/accuracy@sparse": 0.3})]
    # run_id, store and the URL of the engine started for a run are not settings
    assert compared["differing"] == {"optimizer.lr": [1e-5, 1e-4]}

    table = CliRunner().invoke(app, ["runs", "compare", "checkpoints/reasoning_rl/lr-low", "reasoning_rl:latest",
                                     "--store", str(tmp_path / "store")], env={"COLUMNS": "200"})
    assert "0.100 → 0.200" in table.output and "0.100 → 0.300" in table.output and "optimizer.lr" in table.output
    missing = CliRunner().invoke(app, ["runs", "compare", "sft:latest", "reasoning_rl:latest", "--store",
                                       str(tmp_path / "store")])
    assert missing.exit_code == 2 and "run 1: sft:latest: no committed checkpoint named 'sft'" in missing.stderr
    assert "it holds init:latest, reasoning_rl:latest" in missing.stderr
