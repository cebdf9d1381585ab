"""An SFT job SIGKILLed at five moments, each rerun picking up where the store says it was: downloading its
init checkpoint, training before any commit, committing resume state, training after a resume, and
committing its final checkpoint. The last rerun ends with the metrics of a run never interrupted, every
listed artifact verifies, and no process or temporary file is left."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from infra.launch import StageFailed, run_stage_job
from infra.launchers.local import LocalLaunch
from infra.store import open_store
from stages.common.events import parse_event
from tests.faults.processes import left_running, running, tree, wait_for
from tests.sft_fixtures import losses, run_sft, small_config

pytestmark = pytest.mark.slow


def _claimed(store_root: str, name: str) -> bool:
    claims = Path(store_root, name, "_CLAIM")
    return claims.is_dir() and any(claims.iterdir())


class Job:
    """The SFT job under the local launcher, as a flow runs it, in a thread: its events as they come."""

    def __init__(self, config, workdir: Path):
        self.events: list[dict] = []
        path = workdir / "run.json"
        path.write_text(config.model_dump_json())
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self.thread.start()

    def _run(self, path: Path) -> None:
        try:
            run_stage_job(LocalLaunch(nproc=1, threads_per_proc=1), "stages.sft.train", path, self._line)
        except StageFailed as failure:
            self.failure = failure

    def _line(self, line: str) -> None:
        if (event := parse_event(line)) is not None:
            self.events.append(event)

    def stepped(self, step: int) -> bool:
        return any(e["event"] == "step" and e["step"] >= step for e in self.events)


def test_an_sft_job_killed_at_five_moments_ends_as_if_never_killed(small_store, tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    config = small_config(small_store, "killed-five-times", checkpoint_every=3)
    root = small_store["root"]
    workdir = tmp_path / "job"
    workdir.mkdir()
    moments = {
        "downloading the init checkpoint": lambda job: any(workdir.glob("job-*/rank-0/.init.partial-*")),
        "training, nothing committed": lambda job: job.stepped(2),
        "committing resume state": lambda job: _claimed(root, config.resume_prefix + "step-000003"),
        "training after a resume": lambda job: job.stepped(5),
        "committing the final checkpoint": lambda job: _claimed(root, config.output_name),
    }
    store = open_store(root)
    for moment, reached in moments.items():
        job = Job(config, workdir)
        wait_for(lambda job=job, reached=reached: reached(job) or not job.thread.is_alive(), 300, moment)
        process = running("stages.sft.train", under=os.getpid()) or pytest.fail(
            f"{moment}: the job ended before it: {job.failure}")
        process.kill()
        job.thread.join(timeout=60)
        assert job.failure is not None and job.failure.returncode == -9, moment
        assert left_running([process]) == []
        assert not store.is_committed(config.output_name), moment
        assert all(store.open(name).verify() == [] for name in store.list_committed(config.resume_prefix))
        assert not list(workdir.glob("job-*")), f"{moment}: the launcher left the job's scratch folder"

    finished = Job(config, workdir)
    finished.thread.join(timeout=600)
    assert finished.failure is None
    assert [e["step"] for e in finished.events if e["event"] == "resumed"] == [6]
    never_killed = run_sft(small_config(small_store, "never-killed", checkpoint_every=3), tmp_path)
    final, reference = store.open(config.output_name), store.open(never_killed[-1]["checkpoint"])
    assert [r["loss"] for r in _metrics(final)] == pytest.approx([r["loss"] for r in _metrics(reference)], abs=1e-5)
    assert losses(finished.events) == pytest.approx(losses(never_killed)[6:], abs=1e-5)
    assert final.verify() == []
    assert tree(temp) == []


def _metrics(artifact) -> list[dict]:
    return [json.loads(line) for line in artifact.read_bytes("metrics.jsonl").decode().splitlines()]
