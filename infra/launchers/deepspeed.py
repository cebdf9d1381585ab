"""DeepSpeed's own multi-node launcher: a hostfile from the config (or from the Slurm allocation this
runs in), ranks started on each host over pdsh/ssh, the variables they need carried in `.deepspeed_env`.

Every host needs this repository at the same path with its virtualenv, and passwordless ssh from this
machine. pdsh labels each output line with its host; DeepSpeed's launcher exits with a failed rank's
exit code, and on SIGTERM (a cancel) stops the ranks on every host itself.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from infra.launch import JOB_DIR_ENV, JOB_ID_ENV, JobRequest, LaunchFailed
from infra.launchers.fields import Environment
from infra.launchers.process import ProcessJob
from infra.lifetime import environment_for_other_machines

# What the ranks on other hosts need of this process's environment: the store and its credentials,
# tracking, the hub, DeepSpeed's accelerator, our own settings (less the owner pid: a process of this machine).
FORWARDED_PREFIXES = ("POSTTRAIN_", "AWS_", "WANDB_", "HF_", "DS_", "NCCL_", "OMP_NUM_THREADS", "GLIBC_TUNABLES",
                      "TOKENIZERS_PARALLELISM", "PYTHONUNBUFFERED")
# A host name or an IPv4 address: it becomes a hostfile line and an ssh target, where a leading '-' would be
# an option and a line break a second host.
HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9.-]*$"


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., description="Host name as ssh reaches it.")
    slots: int = Field(1, ge=1, description="Ranks on it (its GPUs).")

    @field_validator("name")
    @classmethod
    def _a_host_name(cls, name: str) -> str:
        if not re.fullmatch(HOST_NAME, name):
            raise ValueError(f"{name!r} is not a host name")
        return name


class DeepSpeedLaunch(BaseModel):
    """Start the ranks on several hosts with DeepSpeed's launcher over ssh (pdsh)."""

    model_config = ConfigDict(extra="forbid", title="DeepSpeed multi-node")
    kind: Literal["deepspeed"] = Field("deepspeed", description="several hosts through DeepSpeed's launcher (pdsh or ssh)")
    hosts: list[Host] = Field(default_factory=list, description="The hostfile, one entry per host; empty: the "
                                                                "nodes of the Slurm allocation this runs in.")
    slots_per_host: int = Field(1, ge=1, description="Ranks per node when the hosts come from a Slurm allocation.")
    master_addr: str | None = Field(None, pattern=HOST_NAME, description="Rendezvous address (a host name or IP); "
                                                                         "default the first host's.")
    master_port: int = Field(29500, ge=1024, le=65535, description="the rendezvous port on the first host")
    ssh_port: int | None = Field(None, ge=1, le=65535, description="ssh port on the hosts; default ssh's own.")
    environment: Environment = Field(default_factory=dict, description="More variables for every rank "
                                     "(e.g. DS_ACCELERATOR=cpu for CPU hosts).")

    def hostfile_lines(self) -> list[str]:
        hosts = self.hosts or [Host(name=name, slots=self.slots_per_host) for name in slurm_allocation_hosts()]
        return [f"{host.name} slots={host.slots}" for host in hosts]

    def environment_file_lines(self) -> list[str]:
        """`.deepspeed_env`: DeepSpeed prefixes each line with `export` in the command it runs on every host."""
        forwarded = {name: value for name, value in environment_for_other_machines().items()
                     if name.startswith(FORWARDED_PREFIXES)}
        # Not this machine's accelerator guess: the hosts' own may differ (a CPU-only submit host).
        variables = forwarded | {"PYTHONUNBUFFERED": "1"} | self.environment
        return [f"{name}={shlex.quote(value)}" for name, value in sorted(variables.items())]

    def command(self, request: JobRequest, hostfile: Path) -> list[str]:
        command = [sys.executable, "-m", "deepspeed.launcher.runner", "--hostfile", str(hostfile),
                   "--master_port", str(self.master_port)]
        command += ["--master_addr", self.master_addr] if self.master_addr else []
        command += ["--ssh_port", str(self.ssh_port)] if self.ssh_port else []
        return command + ["--module", request.module, "--config", str(request.config_path)]

    def start(self, request: JobRequest) -> ProcessJob:
        hostfile = request.job_dir / "hostfile"
        hosts = self.hostfile_lines()
        hostfile.write_text("\n".join(hosts) + "\n")
        job_id = f"deepspeed:{hosts[0].split()[0]}:{os.getpid()}"
        environment_file = request.job_dir / ".deepspeed_env"
        environment_file.write_text("\n".join(self.environment_file_lines() + [
            f"{JOB_DIR_ENV}={shlex.quote(str(request.job_dir))}", f"{JOB_ID_ENV}={job_id}"]) + "\n")
        # Our own file, not ./.deepspeed_env: two jobs started from one folder must not share one.
        env = environment_for_other_machines()
        env["DS_ENV_FILE"] = str(environment_file)
        return ProcessJob(self.command(request, hostfile), env, None, job_id)


def slurm_allocation_hosts() -> list[str]:
    """The nodes of the Slurm allocation this process runs in (salloc, sbatch)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise LaunchFailed("launch.hosts is empty and this is not inside a Slurm allocation (no "
                           "SLURM_JOB_NODELIST): name the hosts")
    shown = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
    if shown.returncode != 0:
        raise LaunchFailed(f"scontrol show hostnames {nodelist}: {shown.stderr.strip()}")
    return shown.stdout.split()
