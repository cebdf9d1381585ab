"""The cluster fixtures start real daemons that real clients reach: sbatch/srun/scontrol, and pdsh over ssh."""

import os
import re
import shlex
import subprocess
import sys
import time

from tests.cluster_fixtures import SlurmCluster, SshHosts

_ACTIVE_JOB_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"}


def test_a_two_node_slurm_job_runs_the_venv_python_on_both_nodes(slurm_cluster: SlurmCluster, tmp_path):
    env = {**os.environ, **slurm_cluster.environment}
    output = tmp_path / "job.out"
    # Each task prints the node it ran on: two distinct names prove one task per node, not two on one.
    step = shlex.join([sys.executable, "-c", "import os; print(os.environ['SLURMD_NODENAME'])"])
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--partition={slurm_cluster.partition}",
         f"--chdir={tmp_path}", f"--output={output}", f"--wrap=srun {step}"],
        env=env, capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip().split(";")[0]

    shown = _wait_for_job_end(job_id, env, timeout=30)
    job_output = output.read_text(errors="replace") if output.exists() else "(no output file)"
    assert re.search(r"\bJobState=COMPLETED\b", shown), shown + job_output
    assert re.search(r"\bExitCode=0:0\b", shown), shown
    assert re.search(r"\bNumNodes=2\b", shown), shown
    assert sorted(job_output.split()) == sorted(slurm_cluster.nodes), job_output


def _wait_for_job_end(job_id: str, env: dict[str, str], timeout: float) -> str:
    """`scontrol show job` once the job has ended. Polled rather than `sbatch --wait`, which first looks after
    2 s and next after 10 s: a one-second job would take ten."""
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, check=True).stdout
        state = re.search(r"\bJobState=(\S+)", shown)
        if state and state[1] not in _ACTIVE_JOB_STATES:
            return shown
        assert time.monotonic() < deadline, f"job {job_id} still active after {timeout} s:\n{shown}"
        time.sleep(0.2)


def test_pdsh_reaches_both_hosts_over_ssh(ssh_hosts: SshHosts):
    done = subprocess.run(
        ["pdsh", "-w", ",".join(ssh_hosts.hosts), "echo", "hi"],
        env={**os.environ, **ssh_hosts.environment}, capture_output=True, text=True, timeout=20,
    )
    assert done.returncode == 0, done.stderr
    # pdsh prefixes each line with the host that printed it.
    assert sorted(done.stdout.splitlines()) == [f"{host}: hi" for host in sorted(ssh_hosts.hosts)], done.stdout + done.stderr
