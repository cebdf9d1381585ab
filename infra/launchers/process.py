"""A job that is one process on this machine (torchrun, DeepSpeed's launcher): its output, end and cancel."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from infra.launch import JobEnd

TERM_GRACE_S = 10.0


class ProcessJob:
    def __init__(self, command: list[str], env: dict[str, str], cwd: Path | None, job_id: str):
        self.job_id = job_id
        # Its own process group: a cancel reaches the launcher and every rank it started on this machine.
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        bufsize=1, env=env, cwd=cwd, start_new_session=True)
        self.cancelled = False

    def lines(self) -> Iterator[str]:
        for line in self.process.stdout:
            yield line.rstrip("\n")

    def wait(self) -> JobEnd:
        returncode = self.process.wait()
        self.process.stdout.close()
        if self.cancelled:
            return JobEnd("CANCELLED", returncode)
        return JobEnd("COMPLETED" if returncode == 0 else "FAILED", returncode)

    def cancel(self) -> None:
        """SIGTERM to the job's process group (the ranks save nothing half-way: the store commits last),
        SIGKILL to whatever is left after the grace period."""
        if self.process.poll() is not None:
            return
        self.cancelled = True
        _signal_group(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass
