"""What a fault test needs to know about processes: who descends from whom, and that they are gone."""

from __future__ import annotations

import time
from pathlib import Path

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def running(command_part: str, under: int) -> psutil.Process | None:
    """The first descendant of `under` whose command line contains `command_part`."""
    for process in descendants(under):
        try:
            if any(command_part in part for part in process.cmdline()):
                return process
        except psutil.NoSuchProcess:
            continue
    return None


def left_running(processes: list[psutil.Process], within_s: float = 30.0) -> list[str]:
    """Those of `processes` still alive after `within_s` (zombies count as gone: they hold no resources)."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return [" ".join(p.cmdline()[:4]) for p in alive if p.is_running()]
        time.sleep(0.2)


def wait_for(condition, timeout_s: float, what: str, poll_s: float = 0.005):
    """Poll `condition()` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(poll_s)
    raise TimeoutError(f"never saw {what} within {timeout_s:g} s")


def tree(folder: Path) -> list[str]:
    """Every path below `folder`, relative: what a test compares to say "nothing was left behind"."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
