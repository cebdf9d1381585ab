"""Every rollout engine a run starts, on record: which checkpoint and how long from launch until it answered.

A pipeline names a ledger file in POSTTRAIN_ENGINE_STARTS for itself and every process it starts (stage jobs
on this machine inherit it); each engine started under it — ours or SGLang's, by the flow or by a stage job —
adds a line when it first answers. On a GPU cluster an engine start costs minutes (loading the weights): the
report's counts are what keeping engines across stages (flows/engine_pool.py) saves. An engine a job starts on
another machine is counted only where the ledger's folder is on a file system both machines share.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LEDGER_ENV = "POSTTRAIN_ENGINE_STARTS"


def record_engine_start(checkpoint: str, seconds: float) -> None:
    """One line for an engine that came up on `checkpoint` after `seconds`; nothing without a ledger."""
    ledger = os.environ.get(LEDGER_ENV)
    if not ledger:
        return
    line = json.dumps({"checkpoint": checkpoint, "seconds": round(seconds, 3), "pid": os.getpid()}) + "\n"
    # One write of a short line to a file opened for appending: lines from several processes never interleave.
    try:
        with open(ledger, "a", encoding="utf-8") as file:
            file.write(line)
    except OSError:  # a job on another machine inherited the name of a file it cannot reach: not counted there
        return


def engine_starts(ledger: Path) -> list[dict]:
    """The ledger's lines, in the order the engines came up (none for a ledger not written yet)."""
    if not ledger.is_file():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines() if line.strip()]


def starts_figures(starts: list[dict]) -> dict:
    """What a report gives of some engine starts: how many, and their seconds from launch to answering, summed
    (engines started side by side each count their own)."""
    return {"engine_starts": len(starts), "engine_start_s": round(sum(start["seconds"] for start in starts), 1)}


@contextmanager
def recording_engine_starts(ledger: Path) -> Iterator[Path]:
    """Engines started by this process and its children while the block runs go on `ledger`."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    before = os.environ.get(LEDGER_ENV)
    os.environ[LEDGER_ENV] = str(ledger)
    try:
        yield ledger
    finally:
        if before is None:
            os.environ.pop(LEDGER_ENV, None)
        else:
            os.environ[LEDGER_ENV] = before
