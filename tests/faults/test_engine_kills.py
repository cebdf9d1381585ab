"""A rollout engine SIGKILLed at five moments: its caller gets a named error, not a hang; its downloads go
with it; and a fresh engine on the same checkpoint samples exactly what the first one did."""

from __future__ import annotations

import os
import signal
import tempfile
import threading

import psutil
import pytest

from rollout.client import EngineUnavailableError
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams
from tests.faults.processes import left_running, tree, wait_for

pytestmark = pytest.mark.slow
MOMENTS = ("starting up, its download begun", "idle", "generating", "downloading an update", "serving the update")
SEEDED = SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True, sampling_seed=11)
PROMPT = [[5, 6, 7, 8, 9]]


def _in_background(call) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run():
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - the test inspects what the caller got
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _kill_at(moment: str, checkpoint: str, log) -> str:
    """SIGKILL an engine at `moment`; what a caller waiting on it got (an error's type, or its answer)."""
    engine = EngineProcess(checkpoint, log)
    engine.launch()
    process = psutil.Process(engine.service.process.pid)
    background = None
    if moment == "starting up, its download begun":
        # The first file of its download (a small checkpoint downloads in milliseconds: waiting for a
        # `.partial` to be seen was a race the poll could lose).
        wait_for(lambda: engine.downloads.exists() and any(engine.downloads.rglob("*")), 60, "the start-up download")
    else:
        client = engine.wait_ready()
        if moment == "generating":
            long = SamplingParams(temperature=1.0, max_new_tokens=400, ignore_eos=True)
            background = _in_background(lambda: client.generate(PROMPT * 64, long))
            wait_for(lambda: process.cpu_percent(interval=0.2) > 50, 30, "the engine busy generating")
        elif moment == "downloading an update":
            downloads_before = len(list(engine.downloads.iterdir()))
            background = _in_background(lambda: client.update_weights(checkpoint, "1"))
            wait_for(lambda: len(list(engine.downloads.iterdir())) > downloads_before, 60, "the update's download")
        elif moment == "serving the update":
            client.update_weights(checkpoint, "1")
    os.kill(process.pid, signal.SIGKILL)
    saw = "no call in flight"
    if background is not None:
        thread, errors = background
        thread.join(timeout=60)
        assert not thread.is_alive(), f"{moment}: the caller hangs on a dead engine"
        assert not errors or isinstance(errors[0], EngineUnavailableError), errors
        saw = type(errors[0]).__name__ if errors else "its answer"
    engine.stop()
    assert not engine.downloads.exists(), f"{moment}: the engine's downloads outlived it"
    assert left_running([process]) == []
    return saw


def test_an_engine_killed_at_any_moment_leaves_nothing_and_changes_nothing(small_store, tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    checkpoint = small_store["init"]
    with EngineProcess(checkpoint, tmp_path / "before.log") as client:
        before = client.generate(PROMPT, SEEDED)

    callers_saw = {moment: _kill_at(moment, checkpoint, tmp_path / f"{moment}.log") for moment in MOMENTS}

    with EngineProcess(checkpoint, tmp_path / "after.log") as client:
        after = client.generate(PROMPT, SEEDED)
    assert [(s.output_ids, s.output_logprobs) for s in after] == [(s.output_ids, s.output_logprobs) for s in before]
    assert callers_saw["generating"] == "EngineUnavailableError"
    assert tree(temp) == []
