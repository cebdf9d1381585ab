"""Scratch folders that belong to a live process, and the sweep that removes those whose process is gone.

An owned folder holds an flock on its `.lock` for as long as its owner runs; the kernel drops the lock
however the owner ends (SIGKILL and OOM included), so a folder whose lock can be taken is an orphan and
the next owner of a folder beside it removes it. Used for a stage job's scratch (infra/launch.py) and for
the temporary folder of a `posttrain` command and everything it starts.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".lock"


@contextmanager
def owned_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder `parent/<prefix><random>`, held while the block runs and removed after it; orphaned
    folders with the same prefix are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    sweep(parent.glob(f"{prefix}*"))
    folder = parent / f"{prefix}{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    with open(folder / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def sweep(folders: Iterable[Path]) -> None:
    """Remove those of `folders` whose owner is gone (their lock is free)."""
    for folder in folders:
        try:
            lock = open(folder / LOCK_FILE)
        except OSError:  # not an owned folder (or removed meanwhile): not ours to judge
            continue
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner runs
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def private_temp(prefix: str = "posttrain-run-") -> Iterator[Path]:
    """This process's temporary folder and its children's while the block runs: an owned folder in the system
    temp folder that TMPDIR and `tempfile` point to. What the command and the processes it starts leave in
    temp (a library's staging files, a download cut short) goes with it, or with the next command when this
    one is killed."""
    with owned_dir(Path(tempfile.gettempdir()), prefix) as folder:
        before = os.environ.get("TMPDIR"), tempfile.tempdir
        os.environ["TMPDIR"], tempfile.tempdir = str(folder), str(folder)
        try:
            yield folder
        finally:
            tempfile.tempdir = before[1]
            if before[0] is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before[0]
