"""Start a stage as a (Deep)Speed job and stream its output: the local launcher.

One process runs as plain `python -m <module>`; several run under `torchrun --standalone` on this
machine. The job's stdout/stderr lines go to `on_line` as they arrive (the Prefect flow forwards
them to the run log and turns progress events into a progress artifact). Multi-node launchers
(DeepSpeed hostfile, Kubernetes, Slurm) start the very same command on each node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.lifetime import child_environment
from infra.scratch import owned_dir

# The job's scratch folder, for its ranks (stages/common/inputs.py).
JOB_DIR_ENV = "POSTTRAIN_JOB_DIR"
JOB_PREFIX = "job-"


class StageFailed(RuntimeError):
    def __init__(self, module: str, returncode: int, tail: list[str]):
        self.returncode, self.tail = returncode, tail
        super().__init__(f"{module} exited with {returncode}; last lines:\n" + "\n".join(tail))


@dataclass(frozen=True)
class LocalLauncher:
    nproc: int = 1
    threads_per_proc: int | None = None

    def command(self, module: str, config_path: Path) -> list[str]:
        if self.nproc == 1:
            return [sys.executable, "-m", module, "--config", str(config_path)]
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.nproc}",
                "-m", module, "--config", str(config_path)]

    def environment(self) -> dict[str, str]:
        env = child_environment()  # the job's ranks stop when this process is gone
        threads = self.threads_per_proc or max(1, (os.cpu_count() or 1) // self.nproc)
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

    def run(self, module: str, config_path: Path, on_line: Callable[[str], None], cwd: Path | None = None) -> None:
        """Run the job to its end. Its scratch folder (downloads, local checkpoints, weight pushes) beside
        `config_path` is private to this launch, so two launches of one config (two pipelines on one store)
        never share files; it goes when the job ends, or with the next launch once this one is gone."""
        tail: list[str] = []
        with owned_dir(config_path.parent, JOB_PREFIX) as scratch:
            env = {**self.environment(), JOB_DIR_ENV: str(scratch)}
            with subprocess.Popen(self.command(module, config_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1, env=env, cwd=cwd) as process:
                for line in process.stdout:
                    line = line.rstrip("\n")
                    tail = (tail + [line])[-40:]
                    on_line(line)
                returncode = process.wait()
        if returncode != 0:
            raise StageFailed(module, returncode, tail)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
