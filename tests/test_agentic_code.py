"""Agentic RL on the code tasks end to end: swe and terminal episodes played by their task services in the
bubblewrap sandbox, trained on, and on record; no workspace outlives the stage. And specs/agentic-code.yaml: each
stage gets the data it needs, and SFT's evaluation plays the code tasks as agentic RL's evaluation does."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from data_prep.prepare import publish_prompts
from flows.prepare_data import prepare_data
from flows.spec import SPEC_DIR, PipelineSpec, parse_spec
from flows.stage_inputs import stage_evals
from flows.teacher_domains import named_by_lineage
from infra.publish import published_contract
from infra.rollouts import recorded_shards
from infra.store import open_store
from posttrain.cli import app
from rollout.engine_settings import EngineSettings
from stages.agentic.config import AgenticRlConfig
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.settings import EvalSettings
from stages.evaluation.tool_tasks import episode_settings, evaluate_task_episodes, task_datasets
from suites.prepare import SuiteSizes
from tests.rollout_checks import check_advantages
from tests.stage_jobs import run_stage_job

TASKS = ("swe", "terminal")
SPEC = SPEC_DIR / "agentic-code.yaml"


pytestmark = pytest.mark.usefixtures("bubblewrap")


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


@pytest.fixture(scope="module")
def prepared_spec(tmp_path_factory) -> tuple[PipelineSpec, dict]:
    """specs/agentic-code.yaml's data step, on 8 rows a suite: (the spec, what the pipeline's stages read)."""
    document = yaml.safe_load(SPEC.read_text())
    document["data"]["suites"] = dict.fromkeys(TASKS, {"train": 8, "test": 2})
    document["store"] = str(tmp_path_factory.mktemp("agentic-code") / "store")
    spec = parse_spec(document, str(SPEC))
    return spec, prepare_data.fn(spec, SPEC.parent)


def test_the_spec_gives_sft_the_conversations_and_agentic_rl_and_sft_evaluation_the_task_rows(prepared_spec):
    check = CliRunner().invoke(app, ["spec", "check", str(SPEC)], env={"COLUMNS": "200"})
    assert check.exit_code == 0 and "spec ok" in check.output, check.output
    spec, prepared = prepared_spec
    store = open_store(spec.store)

    def contracts(uris) -> set[str]:
        return {published_contract(store.open(uri)) for uri in uris}

    assert contracts(prepared["stages"]["sft"]) == {"chat@1"}
    # Only the task rows carry the repository, the folder and their checks that an episode is posed from.
    assert contracts(prepared["stages"]["agentic_rl"]) == {"prompt@1"}
    assert task_datasets(store, prepared["evaluated"]) == {suite: prepared["evaluated"][suite] for suite in TASKS}
    assert sorted(prepared["evaluated"].values()) == sorted(prepared["stages"]["agentic_rl"])  # published once
    assert task_datasets(store, named_by_lineage(store, prepared["stages"]["sft"])) == {}  # conversations: not played
    # As the spec's comment says: agentic RL's evaluation is SFT's, so its "before" is SFT's "after" read back.
    evals = stage_evals(spec)
    assert episode_settings(evals["sft"]) == evals["agentic_rl"]


@pytest.mark.slow
def test_sft_evaluation_plays_the_code_tasks_as_agentic_rl_evaluation_does(prepared_spec):
    spec, prepared = prepared_spec
    store = open_store(spec.store)
    settings = EvalSettings(limit_per_suite=2, max_new_tokens=8, max_turns=2)
    metrics = evaluate_task_episodes(store, prepared["init_checkpoint"], prepared["evaluated"], settings,
                                     EngineSettings())
    assert set(metrics) == {"swe/tool_success", "terminal/tool_success", "tool_success", "env_failures"}
    assert metrics["env_failures"] == 0
    # Agentic RL's evaluation with these settings on its task rows reads that one back: no engine is reached.
    nowhere = EngineSettings(engine_urls=["http://127.0.0.1:9"])
    assert evaluate_agentic(store, prepared["init_checkpoint"], prepared["stages"]["agentic_rl"], list(TASKS),
                            episode_settings(settings), nowhere) == metrics


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
        # The untrained model makes no well-formed tool call: each episode ends after its first turn and is verified
        # in the sandbox (swe's hidden calls, terminal's checker), and fails. No group has a reward spread, so they are
        # trained as drawn here to check the machinery (tests/test_dynamic_sampling.py: otherwise passed over).
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
    # Their workspaces were made in the sandbox's folder (their verdicts ran there) and all are gone.
    assert watch.seen, "no sandbox workspace was ever made: the episodes never reached the sandbox"
    assert not list(temp.glob("posttrain-workspace-*"))
