"""Agentic RL on the code tasks end to end: swe and terminal episodes played by their task services in the
bubblewrap sandbox, trained on, and on record; no workspace outlives the stage."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from data_prep.prepare import publish_prompts
from flows.prepare_data import prepare_data
from flows.spec import SPEC_DIR, parse_spec
from infra.publish import published_contract
from infra.rollouts import recorded_shards
from infra.store import open_store
from posttrain.cli import app
from stages.agentic.config import AgenticRlConfig
from stages.evaluation.tool_tasks import task_datasets
from suites.prepare import SuiteSizes
from tests.rollout_checks import check_advantages
from tests.stage_jobs import run_stage_job
from tests.system_packages import ensure_bubblewrap

TASKS = ("swe", "terminal")
SPEC = SPEC_DIR / "agentic-code.yaml"


@pytest.fixture(scope="module", autouse=True)
def bubblewrap():
    ensure_bubblewrap()


@pytest.fixture(scope="module")
def code_datasets(small_store) -> list[str]:
    """The swe and terminal suites' task rows (prompt@1: the repository or folder and its check ride in the row's
    metadata), published into the small store beside its tiny model."""
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        return sorted(publish_prompts(store, suite, SuiteSizes(8, 2), 0, Path(workdir), "tests")[0].uri
                      for suite in TASKS)


class WorkspaceWatch:
    """Polls a temporary folder for sandbox workspaces while the stage runs: the tasks' tools and checks ran in
    the sandbox only if some appeared."""

    def __init__(self, folder: Path):
        self.folder, self.seen = folder, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self):
        while not self._stop.wait(0.01):
            self.seen |= {path.name for path in self.folder.glob("posttrain-workspace-*")}


def test_the_spec_gives_sft_the_conversations_and_agentic_rl_and_sft_evaluation_the_task_rows(tmp_path):
    check = CliRunner().invoke(app, ["spec", "check", str(SPEC)], env={"COLUMNS": "200"})
    assert check.exit_code == 0 and "spec ok" in check.output, check.output
    document = yaml.safe_load(SPEC.read_text())
    document["data"]["suites"] = dict.fromkeys(TASKS, {"train": 8, "test": 2})
    document["store"] = str(tmp_path / "store")
    prepared = prepare_data.fn(parse_spec(document, str(SPEC)), SPEC.parent)
    store = open_store(document["store"])

    def contracts(uris) -> set[str]:
        return {published_contract(store.open(uri)) for uri in uris}

    assert contracts(prepared["stages"]["sft"]) == {"chat@1"}
    # Only the task rows carry the repository, the folder and their checks that an episode is posed from.
    assert contracts(prepared["stages"]["agentic_rl"]) == {"prompt@1"}
    assert task_datasets(store, prepared["evaluated"]) == {suite: prepared["evaluated"][suite] for suite in TASKS}
    assert sorted(prepared["evaluated"].values()) == sorted(prepared["stages"]["agentic_rl"])  # published once


@pytest.mark.slow
def test_swe_and_terminal_episodes_run_in_the_sandbox_train_and_are_on_record(small_store, code_datasets, tmp_path,
                                                                              monkeypatch):
    temp = tmp_path / "temp"  # the job's (and so its task services') temporary folder, where workspaces are made
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    config = AgenticRlConfig(
        run_id="agentic-code", store=small_store["root"], init_checkpoint=small_store["init"], datasets=code_datasets,
        tasks=dict.fromkeys(TASKS, 1.0), group_size=2, groups_per_step=2, max_steps=2, max_in_flight_groups=2,
        engines={"replicas": 1}, sampling={"max_new_tokens": 16}, optimizer={"lr": 1e-3, "warmup_steps": 1},
        # An swe prompt is ~450 tokens of this tokenizer (the issue and four tools' schemas).
        episode={"max_turns": 2, "max_context": 1024, "discard_above": 960},
        # The untrained model fails every episode alike, so no group has a reward spread: trained as drawn here to
        # check the machinery (tests/test_dynamic_sampling.py checks such groups are otherwise passed over).
        dynamic_sampling={"enabled": False})
    with WorkspaceWatch(temp) as watch:
        events = run_stage_job("stages.agentic.train", config, tmp_path)

    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2] and all(s["trained_tokens"] > 0 for s in steps)
    assert all(not s["env_failures"] for s in steps), [s["env_failures"] for s in steps]  # every service answered
    store = open_store(small_store["root"])
    assert store.open(config.output_name).lineage()["config"]["tasks"] == dict.fromkeys(TASKS, 1.0)
    rows = [row for shard in recorded_shards(store.open(config.output_name)) for row in shard.table().to_pylist()]
    check_advantages(rows, lambda rewards: rewards - rewards.mean())
    # Both tasks' groups were trained and recorded, each episode with the verdict its service gave (or cut short).
    assert {row["task"] for row in rows} == set(TASKS)
    assert all(row["status"] in ("ok", "truncated") and row["reward"] in (0.0, 1.0) for row in rows)
    # Their workspaces were made in the sandbox's folder (a check or a tool ran there) and all are gone.
    assert watch.seen, "no sandbox workspace was ever made: the episodes never reached the sandbox"
    assert not list(temp.glob("posttrain-workspace-*"))
