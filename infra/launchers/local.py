"""This machine: one process as `python -m <module>`, several under `torchrun --standalone`."""

from __future__ import annotations

import os
import socket
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from infra.launch import JOB_DIR_ENV, JOB_ID_ENV, JobRequest
from infra.launchers.process import ProcessJob
from infra.lifetime import child_environment


class LocalLaunch(BaseModel):
    """Run the job on the machine that runs the flow."""

    model_config = ConfigDict(extra="forbid", title="This machine")
    kind: Literal["local"] = Field("local", description="this machine")
    nproc: int = Field(1, ge=1, description="Trainer processes (ranks) on this machine; one per GPU.")
    threads_per_proc: int | None = Field(None, ge=1, description="CPU threads per rank; default the cores shared out.")

    def command(self, request: JobRequest) -> list[str]:
        if self.nproc == 1:
            return [sys.executable, "-m", request.module, "--config", str(request.config_path)]
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.nproc}",
                "-m", request.module, "--config", str(request.config_path)]

    def environment(self) -> dict[str, str]:
        env = child_environment()  # the job's ranks stop when this process is gone
        return with_rank_defaults(env, self.threads_per_proc or max(1, (os.cpu_count() or 1) // self.nproc))

    def start(self, request: JobRequest) -> ProcessJob:
        job_id = f"local:{socket.gethostname()}:{os.getpid()}"
        env = {**self.environment(), JOB_DIR_ENV: str(request.job_dir), JOB_ID_ENV: job_id}
        return ProcessJob(self.command(request), env, None, job_id)


def with_rank_defaults(env: dict[str, str], threads: int) -> dict[str, str]:
    """`env` with what every rank wants unless the operator set it."""
    env = dict(env)
    # Several ranks on one CPU must not each spawn a thread per core.
    env.setdefault("OMP_NUM_THREADS", str(threads))
    if not _has_cuda():
        env.setdefault("DS_ACCELERATOR", "cpu")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # glibc hands blocks above its mmap threshold back to the OS on free, so every step's large
    # activations were fresh page faults: 15% of an SFT job's CPU time went to the kernel. A fixed
    # 32 MiB threshold and a lazy trim keep them in the heap (80 demo steps: 54 s → 51 s on CPU).
    env.setdefault("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824")
    return env


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
