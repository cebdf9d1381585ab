"""The code sandbox of the software-engineering and terminal tasks: an episode's workspace, its commands run
under bubblewrap.

Each episode gets a fresh copy of its files in a temporary folder, seen inside the sandbox as /workspace, the
one writable place besides a private /tmp. Of the host, a command sees only its system (/usr and the links
into it, /etc) and the Python install the sandbox's `python` is, read-only: not the project checkout, the
artifact store (the hidden tests and expected values, which an agent could read to hack its reward), home
folders, the other episodes' workspaces (the host's temporary folder) or anything else. The network is a
namespace of its own (loopback only, not the host's), and the workspace folder is removed when the episode
ends, however it ends.

Every command runs as a user id of its own (one per workspace, not root and with no capabilities), with
rlimits on CPU time, address space, processes and file size, a wall-clock limit and a cap on the output
kept. Its result names the limits that acted (`CommandResult.contained`), so an episode's record can say
what was contained.

Why a user id of its own: the service runs as root, and the kernel never applies RLIMIT_NPROC to root,
not even through a user namespace that maps the sandbox's user to root (`bwrap --unshare-user --uid 65534`
runs as host uid 0, still exempt: a fork bomb there went past its limit). So bwrap runs as root without a
user namespace, sets up the mounts, and `setpriv` drops to the workspace's unprivileged uid before the
command starts: RLIMIT_NPROC counts that uid's processes host-wide, and since no other process ever runs
as that uid, the count is this workspace's alone. The same uid also keeps ordinary file permissions in force
inside (/etc/shadow stays unreadable). A cgroup's pids.max would do it too, but cgroups are not writable
on every machine these services run on; setpriv and prlimit are util-linux, which every Debian has.

What rlimits cannot bound: memory and CPU time are per process (at worst `processes` times the limit, for
no longer than the wall limit), and the workspace's total size only by `file_mb` per file and the wall time.
"""

from __future__ import annotations

import os
import random
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

INSIDE = "/workspace"  # where the workspace is, seen from inside the sandbox
REQUIRED_COMMANDS = {"bwrap": "bubblewrap", "setpriv": "util-linux", "prlimit": "util-linux"}
# Far above any uid a Debian machine hands out (useradd stops at 60000, container id maps at a few
# million): a random one from here is nobody else's, so its process count is the workspace's own.
SANDBOX_UIDS = range(0x3F00_0000, 0x4000_0000)
# The host's folders a command sees, read-only: its programs and libraries, and /etc (ld.so.cache, passwd and group,
# certificates, locales, alternatives; /etc/shadow stays root's). Nothing else of the host: not the project checkout
# nor the artifact store (the hidden tests and expected values a reward hack would read), /home, /root, /srv, /opt,
# /mnt, /var; the Python install is added at its own path (_python_folders).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The PATH a sandboxed command sees: this venv's `python` first, then the host's system.
SANDBOX_PATH = f"{os.path.dirname(sys.executable)}:{SYSTEM_PATH}"


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 10  # CPU seconds per process (RLIMIT_CPU)
    wall_s: float = 30.0  # per command; the whole sandbox is killed when it runs out
    memory_mb: int = 1024  # address space per process (RLIMIT_AS)
    processes: int = 64  # processes and threads at once (RLIMIT_NPROC of the workspace's own uid)
    file_mb: int = 64  # largest file a command may write (RLIMIT_FSIZE)
    output_bytes: int = 16_384  # stdout and stderr together; the middle is cut beyond this
    tmp_mb: int = 256  # the private /tmp and /dev/shm are memory (tmpfs): their sizes are capped


@dataclass(frozen=True)
class CommandResult:
    exit_code: int  # 128 + N when a signal N ended it, as a shell reports it
    output: str  # stdout and stderr interleaved, the middle cut when longer than the limit
    timed_out: bool
    contained: tuple[str, ...] = ()  # the limits that acted, the one that stopped the command first

    @property
    def violation(self) -> str | None:
        return self.contained[0] if self.contained else None


# A limit the kernel enforces by a signal names itself by the exit status; the others only show as the
# error a failed call prints (a failed allocation, a failed fork). Those are read from the output, so a
# command could print them on purpose: the names report what happened, they grant nothing.
STOPPING_SIGNALS = {signal.SIGXCPU: "cpu_time", signal.SIGXFSZ: "file_size"}
ERROR_TEXTS = {
    "memory": ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory"),
    "processes": ("Resource temporarily unavailable", "can't start new thread", "Cannot fork"),
    # Python ignores SIGXFSZ, so its writes fail with EFBIG instead; bash names a job's signal when the
    # job is not the command's last.
    "file_size": ("File too large", "File size limit exceeded"),
    "cpu_time": ("CPU time limit exceeded",),
}


class SandboxUnavailable(RuntimeError):
    """This machine cannot run the sandbox; the message names what is missing."""


class Workspace:
    """One episode's files and the sandbox its commands run in. Open it with `open_workspace`."""

    def __init__(self, path: Path, uid: int, limits: SandboxLimits):
        self.path = path  # on the host
        self.uid = uid
        self.limits = limits

    def run(self, command: str | Sequence[str]) -> CommandResult:
        """Run a shell command (a string, through `bash -c`) or an argv list in /workspace."""
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        process = subprocess.Popen(
            [*self._bwrap_argv(), *argv],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        output, timed_out = _collect_output(process, self.limits)
        exit_code = process.wait()
        _end_processes_of(self.uid)
        if exit_code < 0:  # our wall-clock kill
            exit_code = 128 - exit_code
        return _result(exit_code, output, timed_out)

    def read(self, relative: str) -> str:
        return self._host_path(relative).read_text()

    def write(self, relative: str, text: str) -> None:
        target = self._host_path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        for made in [target, *target.parents[: len(target.relative_to(self.path.resolve()).parts) - 1]]:
            os.chown(made, self.uid, self.uid)  # the sandbox's user may change what the caller wrote

    def _host_path(self, relative: str) -> Path:
        # resolve() follows symlinks: a link the sandbox made to /etc/shadow must not let the host, which reads
        # as root, follow it. No sandbox process outlives its command, so nothing can swap a link in meanwhile.
        # A fifo or a device would block or feed the host forever: only regular files are read and written.
        target = (self.path / relative).resolve()
        if not target.is_relative_to(self.path.resolve()):
            raise ValueError(f"{relative!r} is outside the workspace")
        if target.exists() and not target.is_file():
            raise ValueError(f"{relative!r} is not a regular file")
        return target

    def _bwrap_argv(self) -> list[str]:
        limits = self.limits
        return [
            # The private /tmp first: a Python install under the host's /tmp (a checkout there) is bound back into it.
            "bwrap", "--perms", "1777", "--size", str(limits.tmp_mb * 2**20), "--tmpfs", "/tmp", *_system_mounts(),
            "--dev", "/dev", "--proc", "/proc",
            # POSIX semaphores (multiprocessing's locks) live in /dev/shm, which bwrap's /dev leaves root's.
            "--perms", "1777", "--size", str(limits.tmp_mb * 2**20), "--tmpfs", "/dev/shm",
            "--bind", str(self.path), INSIDE, "--chdir", INSIDE, "--remount-ro", "/",
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
            # --die-with-parent: killing bwrap (our wall-clock limit, or this service dying) kills the
            # sandbox's init, and with it every process of its pid namespace, background ones included.
            "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", SANDBOX_PATH,
            "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
            "--",
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--",
            "prlimit", f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_mb * 2**20}",
            f"--nproc={limits.processes}", f"--fsize={limits.file_mb * 2**20}", "--core=0", "--",
        ]


@contextmanager
def open_workspace(files: Mapping[str, str] | Path, limits: SandboxLimits = SandboxLimits()) -> Iterator[Workspace]:
    """A fresh workspace holding `files` (relative path -> text, or a folder to copy), removed on exit."""
    _check_machine()
    path = Path(tempfile.mkdtemp(prefix="posttrain-workspace-"))
    try:
        workspace = Workspace(path, random.SystemRandom().choice(SANDBOX_UIDS), limits)
        if isinstance(files, Mapping):
            os.chown(path, workspace.uid, workspace.uid)
            for relative, text in files.items():
                workspace.write(relative, text)
        else:
            shutil.copytree(files, path, symlinks=True, dirs_exist_ok=True)
            for folder, dirs, names in os.walk(path):  # the sandbox's user may change what the caller put there
                os.chown(folder, workspace.uid, workspace.uid)
                for name in dirs + names:
                    os.chown(os.path.join(folder, name), workspace.uid, workspace.uid, follow_symlinks=False)
        # bwrap's own failures (no permission to make namespaces here, say) would otherwise read as every
        # command's output.
        if (probe := workspace.run(["true"])).exit_code != 0:
            raise SandboxUnavailable(f"bubblewrap cannot start a sandbox on this machine: {probe.output.strip()}")
        yield workspace
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _check_machine() -> None:
    missing = [f"{command} (Debian package {package})" for command, package in REQUIRED_COMMANDS.items()
               if shutil.which(command) is None]
    if missing:
        raise SandboxUnavailable(f"the code sandbox needs {', '.join(missing)}: apt-get install "
                                 + " ".join(sorted({REQUIRED_COMMANDS[m.split()[0]] for m in missing})))
    if os.geteuid() != 0:
        raise SandboxUnavailable("the code sandbox runs as root: it gives each workspace's commands a user id of "
                                 "their own, so that the process limit holds (see the module's docstring)")


def _system_mounts() -> list[str]:
    """The system folders read-only (links into /usr kept as links), empty /run and /var, and the Python the sandbox's
    `python` is, each at its own path through folders made only to reach it (see SYSTEM_FOLDERS for what stays out)."""
    mounts = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            mounts += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            mounts += ["--ro-bind", folder, folder]
    # Tools expect /run and /var/tmp; the host's hold its services' unix sockets (a socket on a read-only mount still
    # accepts connections), package state, logs and spools. /var/tmp is the private /tmp. Every folder on the way to
    # a path is made with --dir (0755): those bwrap makes by itself are 0700, root's, closed to the sandbox's user.
    mounts += ["--dir", "/run", "--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    python_folders = _python_folders()
    for folder in python_folders:
        mounts += [arg for step in reversed(Path(folder).parents) if str(step) != "/" for arg in ("--dir", str(step))]
        mounts += ["--ro-bind", folder, folder]
    host_temp = os.path.realpath(tempfile.gettempdir())
    if any(Path(host_temp).is_relative_to(folder) for folder in [*SYSTEM_FOLDERS, *python_folders]):
        mounts += ["--tmpfs", host_temp]  # the other episodes' workspaces are there
    return mounts


def _python_folders() -> list[str]:
    """The venv the sandbox's `python` is (its packages run Harbor tasks' tests: pytest) and the interpreter it was
    made from, where no system folder holds them already. A venv inside the project checkout is bound alone: the
    checkout's other files stay out (its editable install's path then names a folder holding only the venv)."""
    folders = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return _outermost({folder for folder in folders if not any(Path(folder).is_relative_to(system)
                                                              for system in SYSTEM_FOLDERS)})


def _outermost(folders: set[str]) -> list[str]:
    return sorted(f for f in folders if not any(f != o and Path(f).is_relative_to(o) for o in folders))


def _end_processes_of(uid: int) -> None:
    """Wait out (and kill) what is left of the command's processes. Its pid namespace dies with the sandbox's init,
    but bwrap reports the command's exit a moment before the kernel has reaped the namespace's other processes:
    the next command must not find them (they would count against its process limit), and no caller should.
    Killing by uid is safe because the uid is this workspace's alone."""
    deadline = time.monotonic() + 5
    while remaining := _pids_of(uid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {remaining} of the sandbox's uid {uid} outlived their command")
        for pid in remaining:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _pids_of(uid: int) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with suppress(OSError):  # the process ended while we looked
            status = Path(f"/proc/{pid}/status").read_text()
            if f"\nUid:\t{uid}\t" in status:
                pids.append(int(pid))
    return pids


def _collect_output(process: subprocess.Popen, limits: SandboxLimits) -> tuple[_Output, bool]:
    """Read the command's output until it ends or its wall time runs out (then kill the sandbox)."""
    output = _Output(limits.output_bytes)
    deadline = time.monotonic() + limits.wall_s
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not timed_out:
                timed_out = True
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10  # the pid namespace dies with bwrap; the pipe closes then
            elif remaining <= 0:
                raise RuntimeError(f"the sandbox's output stayed open 10 s after it was killed: {shlex.join(process.args)}")
            if selector.select(max(remaining, 0)):
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output.add(chunk)
    process.stdout.close()
    return output, timed_out


class _Output:
    """The first and last halves of the allowed bytes, and how many were cut between them."""

    def __init__(self, limit: int):
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.cut = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        self.head += chunk[:room]
        self.tail += chunk[room:]
        if len(self.tail) > self.half:
            self.cut += len(self.tail) - self.half
            del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        marker = f"\n[... {self.cut} bytes of output cut ...]\n" if self.cut else ""
        return (bytes(self.head).decode(errors="replace") + marker + bytes(self.tail).decode(errors="replace"))


def _result(exit_code: int, output: _Output, timed_out: bool) -> CommandResult:
    text = output.text()
    contained = ["wall_time"] if timed_out else []
    if exit_code > 128 and (name := STOPPING_SIGNALS.get(exit_code - 128)):
        contained.append(name)
    contained += [name for name, texts in ERROR_TEXTS.items() if any(t in text for t in texts)]
    if output.cut:
        contained.append("output_truncated")
    return CommandResult(exit_code, text, timed_out, tuple(dict.fromkeys(contained)))
