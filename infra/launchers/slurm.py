"""Slurm: a batch script generated from the config, one launcher per node running the same
`-m <module> --config run.json` as on a laptop, its output tailed into the flow and its state read back.

The script runs `srun` with one task per node; each task starts torchrun with the node's ranks, rendezvous
at the allocation's first node. Each output line is labelled with its node. Job state and exit code come
from `scontrol show job` (no accounting database needed); cancel is `scancel`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infra.launch import JOB_DIR_ENV, JOB_ID_ENV, JobEnd, JobRequest, LaunchFailed, polled_end
from infra.launchers.fields import Environment
from infra.lifetime import environment_for_other_machines

POLL_S = 0.5
CANCEL_WAIT_S = 30.0
# States after which a job runs no more (scontrol's JobState).
TERMINAL = {"UNKNOWN_JOB", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY", "SPECIAL_EXIT"}


# What Slurm accepts as a partition or account name (letters, digits, _ . -); partitions may be a list.
SLURM_NAME = r"^[A-Za-z0-9_.-]+$"
SLURM_NAMES = r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$"


class SlurmLaunch(BaseModel):
    """Submit the job with sbatch to the Slurm cluster this machine is a client of (SLURM_CONF)."""

    model_config = ConfigDict(extra="forbid", title="Slurm")
    kind: Literal["slurm"] = Field("slurm", description="a Slurm job (sbatch)")
    nodes: int = Field(1, ge=1, description="Nodes; one launcher per node.")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (--gpus-per-node); 0 for CPU nodes.")
    processes_per_node: int | None = Field(None, ge=1, description="Ranks per node; default one per GPU (1 without).")
    cpus_per_task: int | None = Field(None, ge=1, description="CPUs for each node's launcher and its ranks.")
    # Slurm names, not free text: each becomes an #SBATCH line, where a newline would start a shell line.
    partition: str | None = Field(None, pattern=SLURM_NAMES, description="Partition (-p), or a comma-separated "
                                                                           "list of them; default the cluster's.")
    account: str | None = Field(None, pattern=SLURM_NAME, description="Account to charge (-A).")
    time_limit: str | None = Field(None, pattern=r"^(\d+-)?\d+(:\d{1,2}){0,2}$",
                                   description="Wall-clock limit (--time): MINUTES, HH:MM:SS or D-HH:MM:SS.")
    sbatch_options: list[str] = Field(default_factory=list, description="More sbatch options, one per entry "
                                      "(e.g. --qos=high, --exclusive); each becomes an #SBATCH line.")
    environment: Environment = Field(default_factory=dict, description="Variables for every rank, on top of "
                                        "the submitting process's own (store, wandb and S3 settings travel as is).")
    python: str | None = Field(None, description="The Python on the nodes (a virtualenv's bin/python); default "
                                                 "the one running the flow, for a repository on a shared file system.")
    container_image: str | None = Field(None, description="Run each node's launcher in this container instead "
                                                          "(srun --container-image, with the pyxis plug-in).")
    container_mounts: list[str] = Field(default_factory=list, description="SRC:DST mounts for the container; "
                                        "the run folder must be one (--container-mounts).")
    master_port: int = Field(29500, ge=1024, le=65535, description="Rendezvous port on the first node.")

    @field_validator("sbatch_options")
    @classmethod
    def _one_option_each(cls, options: list[str]) -> list[str]:
        for option in options:
            if not option.startswith("-") or any(c in option for c in "\r\n\0"):
                raise ValueError(f"{option!r}: an sbatch option starting with - on one line, e.g. --qos=high")
        return options

    def ranks_per_node(self) -> int:
        return self.processes_per_node or self.gpus_per_node or 1

    def batch_script(self, request: JobRequest) -> str:
        """The sbatch script for `request`, its output into the job's folder."""
        directives = [f"--job-name={request.name}", f"--nodes={self.nodes}", "--ntasks-per-node=1",
                      f"--output={request.job_dir / 'slurm-%j.out'}", f"--chdir={Path.cwd()}"]
        directives += [f"--gpus-per-node={self.gpus_per_node}"] if self.gpus_per_node else []
        directives += [f"--cpus-per-task={self.cpus_per_task}"] if self.cpus_per_task else []
        directives += [f"--partition={self.partition}"] if self.partition else []
        directives += [f"--account={self.account}"] if self.account else []
        directives += [f"--time={self.time_limit}"] if self.time_limit else []
        ranks = self.ranks_per_node()
        exports = {JOB_DIR_ENV: str(request.job_dir), "PYTHONUNBUFFERED": "1", **self.environment}
        if self.cpus_per_task:
            exports.setdefault("OMP_NUM_THREADS", str(max(1, self.cpus_per_task // ranks)))
        launcher = [self.python or sys.executable, "-m", "torch.distributed.run", f"--nnodes={self.nodes}",
                    f"--nproc_per_node={ranks}", "--node_rank=$SLURM_NODEID", "--master_addr=$MASTER_ADDR",
                    f"--master_port={self.master_port}", "-m", request.module, "--config", str(request.config_path)]
        # A rank that fails ends its peers' collectives, so every node's launcher exits with the same code
        # soon after; one that hangs instead is stopped after a minute.
        srun = ["srun", "--wait=60", "--ntasks-per-node=1"]
        if self.container_image:  # quoted below: an image or mount is a word of the command, never shell text
            srun += [f"--container-image={self.container_image}", f"--container-workdir={Path.cwd()}"]
            srun += [f"--container-mounts={','.join(self.container_mounts)}"] if self.container_mounts else []
        # Each node's lines carry its name; the launcher's own variables are expanded on the node.
        per_node = ('exec > >(exec sed -u "s/^/$SLURMD_NODENAME: /") 2>&1; exec '
                    + " ".join(_quote_keeping_variables(arg) for arg in launcher))
        for option in directives:  # the job's name and folders come from our code; a newline would still be a shell line
            if any(c in option for c in "\r\n\0"):
                raise ValueError(f"sbatch directive {option!r} holds a line break")
        return "\n".join([
            "#!/bin/bash",
            *(f"#SBATCH {option}" for option in directives + self.sbatch_options),
            "set -euo pipefail",
            *(f"export {name}={shlex.quote(value)}" for name, value in exports.items()),
            f'export {JOB_ID_ENV}="slurm:$SLURM_JOB_ID"',
            '# The rendezvous host: the first node, by the address Slurm reaches it at.',
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'MASTER_ADDR=$(scontrol show node "$first" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p")',
            'export MASTER_ADDR',
            " ".join(shlex.quote(arg) for arg in srun) + " bash -c " + shlex.quote(per_node),
            "",
        ])

    def start(self, request: JobRequest) -> SlurmJob:
        script = request.job_dir / "job.sbatch"
        script.write_text(self.batch_script(request))
        # The job gets this process's environment (sbatch's --export=ALL).
        env = environment_for_other_machines()
        submitted = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=env)
        if submitted.returncode != 0:
            raise LaunchFailed(f"sbatch refused the job: {submitted.stderr.strip() or submitted.stdout.strip()}")
        job_number = submitted.stdout.strip().split(";")[0]
        return SlurmJob(job_number, request.job_dir / f"slurm-{job_number}.out")


def _quote_keeping_variables(arg: str) -> str:
    """Quote for bash, leaving $SLURM_NODEID / $MASTER_ADDR to expand on the node."""
    return arg if re.fullmatch(r"--[a-z_]+=\$[A-Z_]+", arg) else shlex.quote(arg)


class SlurmJob:
    def __init__(self, job_number: str, output: Path):
        self.job_number, self.output = job_number, output
        self.job_id = f"slurm:{job_number}"
        self.end: JobEnd | None = None

    def lines(self) -> Iterator[str]:
        """Tail the job's output file until the job has ended and every line is read."""
        offset, pending = 0, ""
        while True:
            ended = self.poll() is not None  # before reading, so nothing written after this read is missed
            chunk = ""
            if self.output.exists():
                with self.output.open("rb") as file:
                    file.seek(offset)
                    data = file.read()
                offset += len(data)
                chunk = data.decode("utf-8", errors="replace")
            *complete, pending = (pending + chunk).split("\n")
            yield from complete
            if ended:
                if pending:
                    yield pending
                return
            if not complete:
                time.sleep(POLL_S)

    def poll(self) -> JobEnd | None:
        """The job's end once Slurm reports one, else None."""
        if self.end is None:
            fields = job_fields(self.job_number)
            state = fields.get("JobState", "UNKNOWN")
            if state in TERMINAL:
                self.end = JobEnd(state, exit_code(fields.get("ExitCode", "0:0")))
        return self.end

    def wait(self) -> JobEnd:
        return polled_end(self.poll, POLL_S)

    def cancel(self) -> None:
        if self.poll() is None:
            subprocess.run(["scancel", self.job_number], capture_output=True, text=True)
            polled_end(self.poll, POLL_S, CANCEL_WAIT_S)


def job_fields(job_number: str) -> dict[str, str]:
    """`scontrol show job -o`'s KEY=VALUE pairs; {} when Slurm does not know the job (any more)."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_number], capture_output=True, text=True)
    if shown.returncode != 0:
        return {"JobState": "UNKNOWN_JOB"} if "Invalid job id" in shown.stderr else {}
    return dict(pair.split("=", 1) for pair in shown.stdout.split() if "=" in pair)


def exit_code(field: str) -> int:
    """ExitCode=3:0 → 3; a job killed by signal N (0:N) → 128+N, as a shell reports it."""
    code, _, signal_number = field.partition(":")
    return int(code) if int(code) or not int(signal_number or 0) else 128 + int(signal_number)
