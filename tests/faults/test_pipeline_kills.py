"""`posttrain pipeline` SIGKILLed in every stage (and once while it commits its data), then run again
until it finishes: the stages that are deterministic end with the metrics of a pipeline never killed,
every artifact the store lists verifies, and each kill takes the whole process family with it (the
Prefect server, engines, task services, stage jobs) and leaves no temporary file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.store import open_store
from tests.faults.processes import descendants, left_running, running, tree, wait_for

pytestmark = pytest.mark.slow
STAGE_JOBS = {"sft": "stages.sft.train", "reasoning_rl": "stages.grpo.reasoning", "agentic_rl": "stages.agentic.train",
              "train_orm": "stages.orm.train", "general_rl": "stages.grpo.general", "distill": "stages.distill.train"}
DETERMINISTIC = ("sft", "reasoning_rl", "train_orm")  # agentic RL is asynchronous; later stages start from it


def _claim_in(store: Path) -> bool:
    return store.exists() and any(store.rglob("_CLAIM/*"))


@pytest.mark.timeout(1200)  # eight pipeline runs: ~6 minutes alone, more beside the heaviest files
def test_a_pipeline_killed_in_every_stage_ends_as_if_never_killed(smoke_pipeline, tmp_path):
    store, reports, temp = tmp_path / "store", tmp_path / "runs", tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PREFECT_HOME": str(tmp_path / "prefect"),
           "POSTTRAIN_WORKDIR": str(tmp_path / "work")}
    # The first run starts its own Prefect server, as on a laptop, and the kill must take it down too; the
    # others use the session's server, as with `posttrain ui` (each own server costs seconds to start).
    own_server = {key: value for key, value in env.items() if key != "PREFECT_API_URL"}
    shared_server = {**env, "PREFECT_API_URL": smoke_pipeline["api_url"]}
    command = [str(Path(sys.executable).with_name("posttrain")), "pipeline", "--preset", "smoke",
               "--store", str(store), "--reports", str(reports)]
    # (reached, poll interval): a data commit's claim lives for a moment, a stage job for seconds (its imports
    # alone), and finding a job walks the process table: polled every 10 ms, that took a core's tenth.
    moments = {"committing the prepared data": (lambda pid: _claim_in(store), 0.01)}
    moments |= {f"in {stage}": (lambda pid, job=job: running(job, pid), 0.2) for stage, job in STAGE_JOBS.items()}

    log = open(tmp_path / "pipeline.log", "ab")
    for run, (moment, (reached, poll_s)) in enumerate(moments.items()):
        pipeline = subprocess.Popen(command, env=own_server if run == 0 else shared_server, cwd=tmp_path, stdout=log,
                                    stderr=subprocess.STDOUT)
        if run == 0:
            wait_for(lambda pipeline=pipeline: running("prefect.server", pipeline.pid), 300, "its own Prefect server",
                     poll_s=0.2)
        wait_for(lambda pipeline=pipeline, reached=reached: pipeline.poll() is not None or reached(pipeline.pid),
                 900, moment, poll_s=poll_s)
        assert pipeline.poll() is None, f"the pipeline ended before {moment}: {(tmp_path / 'pipeline.log').read_text()[-3000:]}"
        family = descendants(pipeline.pid)
        pipeline.kill()
        pipeline.wait()
        assert left_running(family) == [], moment
        listed = open_store(str(store)).list_committed()
        assert all(open_store(str(store)).open(name).verify() == [] for name in listed), moment

    finished = subprocess.run(command, env=shared_server, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, timeout=1200)
    assert finished.returncode == 0, (tmp_path / "pipeline.log").read_text()[-3000:]
    summary = json.loads((reports / (reports / "LATEST").read_text().strip() / "summary.json").read_text())
    expected = {stage["stage"]: stage["metrics_after"] for stage in smoke_pipeline["summary"]["stages"]}
    got = {stage["stage"]: stage["metrics_after"] for stage in summary["stages"]}
    assert {stage: got[stage] for stage in DETERMINISTIC} == {stage: expected[stage] for stage in DETERMINISTIC}
    assert tree(temp) == []
    assert not list((tmp_path / "work").rglob("job-*")), "a killed launch's scratch folder outlived the rerun"
