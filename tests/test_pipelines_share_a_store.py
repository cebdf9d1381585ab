"""Two `posttrain pipeline` runs started together on one fresh store: both finish, they commit every shared
artifact once and end with the same checkpoints, and nothing in the store is torn or left claimed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.store import open_store

pytestmark = pytest.mark.slow


def test_two_pipelines_on_one_store(tmp_path):
    store, reports = tmp_path / "store", tmp_path / "runs"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "POSTTRAIN_WORKDIR": str(tmp_path / "work")}
    env.pop("PREFECT_API_URL", None)
    command = [str(Path(sys.executable).with_name("posttrain")), "pipeline", "--preset", "smoke", "--to-stage", "sft",
               "--store", str(store), "--reports", str(reports)]
    logs = [tmp_path / f"pipeline-{i}.log" for i in range(2)]
    runs = [subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT)
            for log in logs]
    for run, log in zip(runs, logs, strict=True):
        assert run.wait(timeout=900) == 0, log.read_text()[-3000:]

    summaries = [json.loads(path.read_text()) for path in sorted(reports.glob("*/summary.json"))]
    assert len(summaries) == 2  # two reports, not one overwritten by the other
    assert summaries[0]["stages"][0]["checkpoint"] == summaries[1]["stages"][0]["checkpoint"]
    assert summaries[0]["stages"][0]["metrics_after"] == summaries[1]["stages"][0]["metrics_after"]
    opened = open_store(str(store))
    assert all(opened.open(name).verify() == [] for name in opened.list_committed())
    assert not list(store.rglob("_CLAIM/*")) and not list(store.rglob("*.tmp"))
