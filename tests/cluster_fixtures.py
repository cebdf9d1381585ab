"""Real cluster components for the tests: a two-node Slurm cluster and two ssh "hosts", all on 127.0.0.1.

No mocks: sbatch, srun, scontrol, ssh and pdsh talk to real daemons that these fixtures start by hand
(there is no systemd on the CI machine) on free ports, with every file in the session's scratch dirs,
so two pytest-xdist workers each get their own cluster.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from infra.ports import free_port
from tests.system_packages import ensure_debian_packages


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    partition: str
    nodes: tuple[str, ...]
    environment: dict[str, str]  # what a client process (sbatch, scontrol, srun) needs on top of os.environ


@dataclass(frozen=True)
class SshHosts:
    hosts: tuple[str, ...]
    bin_dir: Path  # holds the `ssh` wrapper that knows the hosts
    environment: dict[str, str]  # PATH with bin_dir first, and pdsh told to use ssh


class _Daemons:
    """Daemons run in the foreground as our children: we know their pids, see an early exit, and reap them."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, name: str, command: list[str], **popen_args) -> None:
        # A file, not a pipe: nobody drains a pipe. In the foreground each daemon logs to its stderr too, including
        # what goes wrong before it opens its own log file.
        output = self.logs / f"{name}.out"
        with open(output, "wb") as out:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **popen_args)
        self.started.append((name, process, output))

    def check_alive(self, what: str) -> None:
        for name, process, _ in self.started:
            if process.poll() is not None:
                pytest.fail(f"{what}: {name} exited with code {process.returncode}\n{self.log_tails()}", pytrace=False)

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- {name}\n" + "\n".join(output.read_text(errors="replace").splitlines()[-lines:])
            for name, _, output in self.started
        )

    def stop(self, names: tuple[str, ...], *, exits_within: float = 0.0) -> None:
        """Give these daemons ``exits_within`` seconds to exit on their own, then SIGTERM, then SIGKILL."""
        processes = [process for name, process, _ in self.started if name in names]
        _wait_for_exit(processes, exits_within)
        for signal_them in (subprocess.Popen.terminate, subprocess.Popen.kill):
            for process in processes:
                if process.poll() is None:
                    signal_them(process)
            _wait_for_exit(processes, 5)


def _wait_for_exit(processes: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _wait_until(ready, *, timeout: float, daemons: _Daemons, what: str, last_answer=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        daemons.check_alive(what)
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not ready within {timeout:.0f} s\n{last_answer()}\n{daemons.log_tails()}", pytrace=False)
        time.sleep(0.1)


# --- Slurm ------------------------------------------------------------------------------------------------

_SLURM_CONF = """\
ClusterName={cluster}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller_port}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
# No cgroups on the CI machine: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Job states come from `scontrol show job` (kept MinJobAge seconds), so no accounting database.
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
MpiDefault=none
ReturnToService=2
# A node is what this file says (two CPUs, so two one-CPU jobs share it), whatever the machine has.
SlurmdParameters=config_overrides
SlurmdTimeout=30
MinJobAge=300
KillWait=5
# An impossible request (more nodes than exist) fails at sbatch instead of pending forever.
EnforcePartLimits=ALL
{nodes}
PartitionName={partition} Nodes={node_names} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """slurmctld and two slurmd (nodes n1, n2, two CPUs each) on this machine, authenticated by a private munged.

    Jobs run as the submitting user in its environment (sbatch exports it), so they can run sys.executable.
    """
    ensure_debian_packages(
        "slurm-wlm", "munge", commands=("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "scancel", "squeue")
    )
    root = tmp_path_factory.mktemp("slurm")
    # munged runs as user munge, who cannot enter pytest's temporary folder (mode 700): its files get a folder of
    # their own in the system temp dir, owned by munge. munged insists on mode 755 for the socket's folder.
    munge_dir = Path(tempfile.mkdtemp(prefix="posttrain-munge-"))
    munge_user = pwd.getpwnam("munge")
    key, socket_dir = munge_dir / "munge.key", munge_dir / "run"
    socket_dir.mkdir()
    key.write_bytes(os.urandom(1024))
    for path in (munge_dir, socket_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    munge_dir.chmod(0o755)
    socket_dir.chmod(0o755)
    key.chmod(0o400)
    munge_socket = socket_dir / "munge.socket.2"

    nodes = ("n1", "n2")
    partition = "debug"
    # SlurmctldHost must be this machine's short name (what `hostname -s` prints): slurmctld only runs where it is.
    host = socket.gethostname().split(".")[0]
    node_lines = "\n".join(
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port()} CPUs=2 RealMemory=1000 State=UNKNOWN"
        for node in nodes
    )
    conf = root / "slurm.conf"
    conf.write_text(
        _SLURM_CONF.format(
            cluster=f"ci{os.getpid()}x{free_port()}",  # unique on this machine, whatever the other workers run
            host=host,
            controller_port=free_port(),
            munge_socket=munge_socket,
            root=root,
            nodes=node_lines,
            partition=partition,
            node_names=",".join(nodes),
        )
    )
    (root / "state").mkdir()
    for node in nodes:
        (root / "spool" / node).mkdir(parents=True)
    environment = {"SLURM_CONF": str(conf)}
    client_env = {**os.environ, **environment}

    daemons = _Daemons(root)
    try:
        daemons.start(
            "munged",
            ["munged", "--foreground", f"--socket={munge_socket}", f"--key-file={key}",
             f"--log-file={munge_dir / 'munged.log'}", f"--pid-file={munge_dir / 'munged.pid'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            # Like `runuser -u munge`, without a runuser process between us and munged.
            user=munge_user.pw_uid, group=munge_user.pw_gid, extra_groups=[],
        )
        _wait_until(munge_socket.exists, timeout=10, daemons=daemons, what="munged")
        # -D: in the foreground, as our children (the pid files hold the same pids).
        daemons.start("slurmctld", ["slurmctld", "-D", "-f", str(conf)])
        for node in nodes:
            daemons.start(f"slurmd-{node}", ["slurmd", "-D", "-f", str(conf), "-N", node])

        def all_idle() -> bool:
            try:
                shown = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %T"], env=client_env,
                                       capture_output=True, text=True, timeout=5)
            except subprocess.TimeoutExpired:
                return False
            states = dict(line.split() for line in shown.stdout.splitlines() if line.strip())
            return states == dict.fromkeys(nodes, "idle")

        _wait_until(all_idle, timeout=30, daemons=daemons, what="slurm nodes idle")
        yield SlurmCluster(conf=conf, partition=partition, nodes=nodes, environment=environment)
    finally:
        _stop_slurm(daemons, client_env, partition)
        daemons.stop(("munged",))
        shutil.rmtree(munge_dir, ignore_errors=True)


def _stop_slurm(daemons: _Daemons, client_env: dict[str, str], partition: str) -> None:
    def quietly(*command: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(command, env=client_env, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, -1, "", "")

    if any(name == "slurmctld" and process.poll() is None for name, process, _ in daemons.started):
        # A job's processes belong to slurmstepd, which outlives slurmd: cancel the jobs and let them end first.
        quietly("scancel", f"--partition={partition}")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and quietly("squeue", "--noheader").stdout.strip():
            time.sleep(0.2)
        # slurmd may ignore SIGTERM once slurmctld is gone; `scontrol shutdown` stops them all in order.
        quietly("scontrol", "shutdown")
    daemons.stop(tuple(name for name, _, _ in daemons.started if name != "munged"), exits_within=10)


# --- ssh --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    """Hosts node1 and node2, both this machine through a private sshd, for launchers that ssh or pdsh to nodes.

    Nothing under ~/.ssh is read or written: an `ssh` wrapper first on PATH carries its own client config.
    """
    ensure_debian_packages("pdsh", "openssh-server", "openssh-client", commands=("pdsh", "sshd", "ssh"))
    root = tmp_path_factory.mktemp("ssh")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", str(root / key)], check=True)
    shutil.copy(root / "client_key.pub", root / "authorized_keys")
    port = free_port()
    server_config = root / "sshd_config"
    server_config.write_text(
        f"Port {port}\n"
        "ListenAddress 127.0.0.1\n"
        f"HostKey {root / 'host_key'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        f"PidFile {root / 'sshd.pid'}\n"
        # The keys live in pytest's folder, not in a home with the modes sshd expects there.
        "StrictModes no\n"
        "UsePAM no\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
    )
    hosts = ("node1", "node2")
    client_config = root / "ssh_config"
    client_config.write_text(
        "".join(
            f"Host {host}\n"
            "    HostName 127.0.0.1\n"
            f"    Port {port}\n"
            f"    IdentityFile {root / 'client_key'}\n"
            "    IdentitiesOnly yes\n"
            # A fresh host key every session, and nobody's known_hosts to update.
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    LogLevel ERROR\n"
            # Never wait on a password prompt: a broken key fails at once.
            "    BatchMode yes\n"
            for host in hosts
        )
    )
    bin_dir = root / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(shutil.which("ssh"))} -F {shlex.quote(str(client_config))} "$@"\n')
    wrapper.chmod(0o755)
    # pdsh runs `ssh` from PATH, so it goes through the wrapper too.
    environment = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PDSH_RCMD_TYPE": "ssh"}

    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation dir
    daemons = _Daemons(root)
    try:
        # sshd re-executes itself and so wants an absolute path; -D keeps it our child, -e logs to its output.
        daemons.start("sshd", [shutil.which("sshd"), "-D", "-e", "-f", str(server_config)])

        last_answer = ""

        def answers() -> bool:
            nonlocal last_answer
            try:
                done = subprocess.run(["ssh", hosts[0], "true"], env={**os.environ, **environment},
                                      stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=5)
            except subprocess.TimeoutExpired:
                last_answer = "ssh: no answer within 5 s"
                return False
            last_answer = f"ssh: exit code {done.returncode}: {done.stderr.strip()}"
            return done.returncode == 0

        _wait_until(answers, timeout=10, daemons=daemons, what=f"`ssh {hosts[0]} true` through sshd on port {port}",
                    last_answer=lambda: last_answer)
        yield SshHosts(hosts=hosts, bin_dir=bin_dir, environment=environment)
    finally:
        daemons.stop(("sshd",))
