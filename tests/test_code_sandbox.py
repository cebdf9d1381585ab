"""The code sandbox under real bubblewrap: ordinary work goes through, hostile commands are contained and
named, and nothing of an episode outlives it (no process, no workspace folder)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rollout.agents.envs import code_sandbox
from rollout.agents.envs.code_sandbox import SandboxLimits, SandboxUnavailable, open_workspace

# Short limits keep each hostile command to a few seconds on a busy 2-core machine.
TIGHT = SandboxLimits(cpu_s=1, wall_s=3, memory_mb=512, processes=32, file_mb=8, output_bytes=1000)
CHECKOUT = Path(code_sandbox.__file__).resolve().parents[3]  # the repository the sandbox's module is in


pytestmark = pytest.mark.usefixtures("bubblewrap")


def processes_of(workspace) -> list[str]:
    """Every process still running as the workspace's user or as its bubblewrap (whose argv names the folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:  # it ended while we looked
            continue
        if f"\nUid:\t{workspace.uid}\t" in status or str(workspace.path) in argv:
            found.append(f"{pid}: {argv.replace(chr(0), ' ')}")
    return found


def test_a_command_writes_and_runs_python_with_this_venv():
    with open_workspace({"src/add.py": "def add(a, b):\n    return a + b\n"}) as workspace:
        workspace.write("test_add.py", "from src.add import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
        result = workspace.run("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider test_add.py")
        assert (result.exit_code, result.timed_out, result.contained) == (0, False, ()), result.output
        assert "1 passed" in result.output

        made = workspace.run(["python", "-c", "import sys; open('made.txt', 'w').write(sys.prefix)"])
        assert made.exit_code == 0, made.output
        assert workspace.read("made.txt") == sys.prefix  # the project's own venv runs inside

        pool = "import multiprocessing\nif __name__ == '__main__':\n    with multiprocessing.Pool(2) as pool: print(pool.map(abs, [-1, -2]))"
        assert workspace.run(["python", "-c", pool]).output == "[1, 2]\n"  # /dev/shm is there for its locks


def test_shell_tools_and_python3_with_its_standard_library_work():
    with open_workspace({"data.txt": "b 2\na 1\nc 3\n"}) as workspace:
        shell = workspace.run("sort data.txt | grep -v c | sed 's/ /=/' | awk -F= '{s += $2} END {print NR, s}' > /var/tmp/sum"
                              " && cat /tmp/sum && wc -l < data.txt && head -1 data.txt | cut -d' ' -f1 | tr a-z A-Z")
        assert (shell.exit_code, shell.output) == (0, "2 3\n3\nB\n"), shell.output
        stdlib = "import json, subprocess; print(json.dumps(subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout))"
        python3 = workspace.run(["python3", "-c", stdlib])
        assert (python3.exit_code, python3.output) == (0, '"hi\\n"\n'), python3.output


def test_of_the_host_only_its_system_and_python_are_in_sight():
    """What an agent could read to hack its reward is not there: the project checkout, the artifact store wherever it
    is (a fresh folder under / stands for it), the test's working folder, home folders."""
    store = Path(tempfile.mkdtemp(prefix="posttrain-store-", dir="/"))
    store.chmod(0o755)  # world-readable, as an artifact store is: only its absence keeps it from the sandbox's user
    (store / "answers.parquet").write_text("the hidden tests")
    python = [Path(sys.prefix), Path(sys.base_prefix)]
    try:
        with open_workspace({}, TIGHT) as workspace:
            for folder in [CHECKOUT, Path.cwd(), store, Path("/home"), Path("/root"), Path("/srv"), Path("/mnt")]:
                # Only the way to the Python install shows: the venv in the checkout, pyenv's under /root.
                on_the_way = {p.relative_to(folder).parts[0] for p in python if p.is_relative_to(folder) and p != folder}
                listed = workspace.run(["ls", "-A", str(folder)])
                shown = set(listed.output.split()) if listed.exit_code == 0 else set()
                assert shown <= on_the_way and (listed.exit_code == 0 or "No such file" in listed.output), listed.output
            read = workspace.run(["cat", str(store / "answers.parquet"), str(CHECKOUT / "pyproject.toml")])
            assert read.exit_code != 0 and "the hidden tests" not in read.output and "[project]" not in read.output
    finally:
        shutil.rmtree(store)


def test_a_folder_is_copied_and_the_original_left_alone(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "data.txt").write_text("original")
    with open_workspace(tmp_path) as workspace:
        assert workspace.run("cat pkg/data.txt && echo changed > pkg/data.txt").output == "original"
        assert workspace.read("pkg/data.txt") == "changed\n"
    assert (tmp_path / "pkg" / "data.txt").read_text() == "original"


def test_no_network_to_the_host_or_outside():
    with socket.create_server(("127.0.0.1", 0)) as server, open_workspace({}, TIGHT) as workspace:
        server.settimeout(0.5)
        port = server.getsockname()[1]
        connect = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)"
        to_host = workspace.run(["python", "-c", connect, "127.0.0.1", str(port)])
        assert to_host.exit_code == 1 and "Connection refused" in to_host.output, to_host.output
        with pytest.raises(TimeoutError):
            server.accept()  # the sandbox's loopback is its own: the host's listener never heard from it
        outside = workspace.run(["python", "-c", connect, "1.1.1.1", "53"])
        assert outside.exit_code == 1 and "Network is unreachable" in outside.output, outside.output


def test_nothing_outside_the_workspace_is_writable():
    system = ["/etc/escaped", "/root/escaped", "/usr/escaped", "/escaped", "/workspace/../escaped", "/run/escaped"]
    host_temp_probe = Path(tempfile.gettempdir()) / f"escaped-{os.getpid()}"
    with open_workspace({}, TIGHT) as workspace:
        for target in system:
            result = workspace.run(["bash", "-c", 'echo x > "$1"', "-", target])
            assert result.exit_code != 0, f"{target} was writable"
            assert "Read-only file system" in result.output or "Permission denied" in result.output, result.output
        # The host's temporary folder is covered: a write there lands in the sandbox's own /tmp at most.
        workspace.run(["bash", "-c", 'echo x > "$1"', "-", str(host_temp_probe)])
        assert workspace.run("echo x > /tmp/mine && cat /tmp/mine").output == "x\n"
    assert not any(Path(target).exists() for target in system) and not host_temp_probe.exists()


def test_an_episode_cannot_read_another_ones_workspace():
    with open_workspace({"secret.txt": "first episode's answer"}) as first, open_workspace({}, TIGHT) as second:
        for path in [first.path / "secret.txt", first.path.parent, "/proc/1/root/tmp"]:
            result = second.run(["bash", "-c", 'ls -la "$1"; cat "$1/secret.txt" "$1"', "-", str(path)])
            assert "first episode's answer" not in result.output, result.output
            assert first.path.name not in result.output.replace(str(path), ""), result.output
        assert first.run("cat secret.txt").output == "first episode's answer"


def test_host_paths_refused_by_read_and_write():
    with open_workspace({}, TIGHT) as workspace:
        for escape in ["../outside.txt", "/etc/passwd", "a/../../outside.txt"]:
            with pytest.raises(ValueError, match="outside the workspace"):
                workspace.write(escape, "x")
        workspace.run("ln -s /etc/passwd leak")  # a link the sandbox made must not let the host read for it
        with pytest.raises(ValueError, match="outside the workspace"):
            workspace.read("leak")
        workspace.run("mkfifo pipe")  # reading it would block the host
        with pytest.raises(ValueError, match="not a regular file"):
            workspace.read("pipe")


def test_a_fork_bomb_is_stopped_by_the_process_limit():
    with open_workspace({}, TIGHT) as workspace:
        # The shell's bomb runs on after its first shell returns: the sleep lets it reach the limit.
        for bomb in [":(){ :|:& };:; sleep 1", "python -c 'import os\nwhile True: os.fork()'"]:
            started = time.monotonic()
            result = workspace.run(bomb)
            assert time.monotonic() - started < TIGHT.wall_s + 2
            assert "processes" in result.contained, result
            assert processes_of(workspace) == []
        spawn = "import subprocess\nchildren = []\ntry:\n    while True: children.append(subprocess.Popen(['sleep', '9']))\nexcept OSError as error: print(len(children), error)"
        counted = workspace.run(["python", "-c", spawn])
        assert counted.output.startswith(f"{TIGHT.processes - 1} ") and "processes" in counted.contained, counted
        assert processes_of(workspace) == []
        assert workspace.run("echo fine").output == "fine\n"


def test_a_memory_hog_is_stopped_by_the_memory_limit():
    with open_workspace({}, TIGHT) as workspace:
        result = workspace.run(["python", "-c", "hog = bytearray(2 * 1024**3)"])
        assert result.exit_code == 1 and result.violation == "memory", result


def test_an_endless_loop_is_stopped_by_the_cpu_limit():
    with open_workspace({}, TIGHT) as workspace:
        started = time.monotonic()
        result = workspace.run(["python", "-c", "while True: pass"])
        assert (result.exit_code, result.timed_out, result.violation) == (128 + 24, False, "cpu_time"), result
        assert time.monotonic() - started < TIGHT.wall_s


def test_a_huge_file_is_stopped_by_the_file_size_limit():
    with open_workspace({}, TIGHT) as workspace:
        result = workspace.run("head -c 1G /dev/zero > big")
        assert (result.exit_code, result.violation) == (128 + 25, "file_size"), result
        assert (workspace.path / "big").stat().st_size == TIGHT.file_mb * 2**20
        write_1g = "with open('big2', 'wb') as f:\n    for _ in range(1024): f.write(bytes(2**20))"
        python = workspace.run(["python", "-c", write_1g])  # Python ignores SIGXFSZ
        assert python.violation == "file_size" and "File too large" in python.output, python


def test_a_sleeper_is_stopped_by_the_wall_limit_with_its_children():
    with open_workspace({}, TIGHT) as workspace:
        started = time.monotonic()
        result = workspace.run("sleep 1000 & sleep 1000 & sleep 1000")
        assert (result.exit_code, result.timed_out, result.violation) == (137, True, "wall_time"), result
        assert time.monotonic() - started < TIGHT.wall_s + 1
        assert processes_of(workspace) == []


def test_background_processes_end_with_their_command():
    with open_workspace({}, TIGHT) as workspace:
        result = workspace.run("sleep 1000 & (sleep 1000 &) ; setsid sleep 1000 & echo left")
        assert (result.exit_code, result.output, result.contained) == (0, "left\n", ())
        assert processes_of(workspace) == []


def test_killing_everything_it_can_leaves_the_service_and_workspace_working():
    with open_workspace({}, TIGHT) as workspace:
        # Its parent is the sandbox's init (root's: not its to kill), the test's pids are not in its pid namespace,
        # and -1 reaches only its own user's processes: the background sleep, then (from /bin/kill) its shell.
        kill_all = f"sleep 1000 & kill -9 $PPID 1 {os.getpid()} {os.getppid()}; kill -9 -1; /bin/kill -9 -1; echo unreached"
        result = workspace.run(kill_all)
        assert result.exit_code == 137 and "unreached" not in result.output, result
        assert "kill: (1) - Operation not permitted" in result.output and "No such process" in result.output
        assert processes_of(workspace) == []
        assert workspace.run("echo next").output == "next\n"


def test_long_output_keeps_its_start_and_end_and_says_how_much_was_cut():
    with open_workspace({}, TIGHT) as workspace:
        result = workspace.run("seq 100000")
    total = sum(len(f"{n}\n") for n in range(1, 100001))
    assert result.contained == ("output_truncated",)
    assert result.output.startswith("1\n2\n3\n") and result.output.endswith("99999\n100000\n")
    assert f"[... {total - TIGHT.output_bytes} bytes of output cut ...]" in result.output


def test_the_workspace_is_removed_when_the_episode_ends_however_it_ends():
    with open_workspace({"a.txt": "a"}, TIGHT) as workspace:
        workspace.run("mkdir -p deep/er && chmod 000 deep")
    assert not workspace.path.exists()

    with pytest.raises(RuntimeError, match="episode failed"), open_workspace({"a.txt": "a"}, TIGHT) as workspace:
        raise RuntimeError("episode failed")
    assert not workspace.path.exists()


def test_a_missing_bubblewrap_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SandboxUnavailable, match=r"bwrap \(Debian package bubblewrap\)"):
        with open_workspace({}):
            pass
