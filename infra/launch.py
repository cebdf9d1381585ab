"""Run a stage job wherever its config says: one Protocol for every launcher, one way to run any of them.

A launcher (infra/launchers/: this machine, Slurm, DeepSpeed over ssh, Kubernetes) starts
`python -m <module> --config run.json` on every rank and hands back a `LaunchedJob`: its output lines
as they arrive, its end (the scheduler's state and the exit code) and a cancel. `run_stage_job` drives
one to its end for a flow, so a flow never changes with where its job runs.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from infra.scratch import owned_dir

# The job's scratch folder, for its ranks (stages/common/stage_main.py).
JOB_DIR_ENV = "POSTTRAIN_JOB_DIR"
# Where the job ran, as the scheduler knows it ("slurm:1234", "kubernetes:ns/name"): lineage records it.
JOB_ID_ENV = "POSTTRAIN_JOB_ID"
JOB_PREFIX = "job-"
TAIL_LINES = 40


@dataclass(frozen=True)
class JobRequest:
    module: str        # every rank runs `python -m <module> --config <config_path>`
    config_path: Path  # run.json, absolute; multi-node launchers need it on a folder every node sees
    job_dir: Path      # the job's own scratch folder beside run.json (JOB_DIR_ENV)
    name: str          # what the scheduler shows: posttrain-<stage>


@dataclass(frozen=True)
class JobEnd:
    state: str  # the scheduler's word: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    exit_code: int

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0


class LaunchedJob(Protocol):
    job_id: str  # JOB_ID_ENV's value

    def lines(self) -> Iterator[str]:
        """The job's output lines (a multi-node job's labelled with their node) until its output ends."""

    def wait(self) -> JobEnd:
        """Block until the job has ended."""

    def cancel(self) -> None:
        """End the job (idempotent); returns once the scheduler says it is gone."""


def polled_end(poll: Callable[[], JobEnd | None], every_s: float, within_s: float = math.inf) -> JobEnd | None:
    """`poll()` every `every_s` until it gives the job's end, or None after `within_s`."""
    deadline = time.monotonic() + within_s
    while (end := poll()) is None and time.monotonic() < deadline:
        time.sleep(every_s)
    return end


class Launcher(Protocol):
    def start(self, request: JobRequest) -> LaunchedJob: ...


class LaunchFailed(RuntimeError):
    """The scheduler refused the job (a bad partition, too many nodes, no such command)."""


class StageFailed(RuntimeError):
    def __init__(self, module: str, job_id: str, end: JobEnd, tail: list[str], cause: str | None = None):
        self.module, self.job_id, self.end, self.tail = module, job_id, end, tail
        self.returncode = end.exit_code
        where = "" if job_id.startswith("local:") else f" ({job_id})"
        # With the job's own account of what went wrong, one line (a run's state message, a terminal); its
        # traceback is in the job's output, which the flow run's log holds. Without one, its last lines.
        said = f": {cause}" if cause else "; last lines:\n" + "\n".join(tail)
        super().__init__(f"{module}{where} ended {end.state} with exit code {end.exit_code}{said}")

    def because(self, cause: str) -> StageFailed:
        """The same failure, led by what the job said went wrong."""
        return StageFailed(self.module, self.job_id, self.end, self.tail, cause)


def run_stage_job(launcher: Launcher, module: str, config_path: Path, on_line: Callable[[str], None],
                  on_start: Callable[[str], None] = lambda job_id: None) -> str:
    """Run the job to its end, every output line to `on_line`; its job id. A job that does not end
    COMPLETED with exit code 0 raises StageFailed with its state, exit code and last lines, and anything
    that stops this process while it runs (a flow-run cancel's SIGTERM, Ctrl-C) cancels the job first.

    Its scratch folder (downloads, local checkpoints, weight pushes) beside `config_path` is private to
    this launch, so two launches of one config (two pipelines on one store) never share files; it goes
    when the job ends, or with the next launch once this one is gone."""
    config_path = config_path.resolve()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with owned_dir(config_path.parent, JOB_PREFIX) as scratch:
        job = launcher.start(JobRequest(module, config_path, scratch, f"posttrain-{module.split('.')[1]}"))
        try:
            on_start(job.job_id)
            for line in job.lines():
                tail.append(line)
                on_line(line)
            end = job.wait()
        except BaseException:
            job.cancel()
            raise
    if not end.succeeded:
        raise StageFailed(module, job.job_id, end, list(tail))
    return job.job_id
