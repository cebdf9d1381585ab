"""Debian packages that some tests need (Slurm, munge, sshd, pdsh), installed on first use.

CI runs as root on a fresh Debian machine, so the tests install what they use instead of skipping:
a skipped cluster test would turn CI green without ever running it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

# One lock for the machine: two pytest-xdist workers finding the same commands missing must not run
# apt-get at once (dpkg's own lock would fail the second one), and the second then finds them installed.
_LOCK_PATH = Path(tempfile.gettempdir()) / "posttrain-apt-get.lock"
_lists_updated = False


def ensure_debian_packages(*packages: str, commands: tuple[str, ...]) -> None:
    """Install ``packages`` with apt-get unless every one of ``commands`` is already on PATH."""
    global _lists_updated
    if not _missing(commands):
        return
    if os.geteuid() != 0:
        raise RuntimeError(
            f"commands {', '.join(_missing(commands))} are missing and only root can install them: "
            f"apt-get install {' '.join(packages)}"
        )
    with FileLock(_LOCK_PATH, timeout=600):
        if not _missing(commands):
            return  # the other worker installed them while we waited
        # DPkg::Lock::Timeout: wait for an apt run outside the tests instead of failing at once.
        apt = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]
        if not _lists_updated:
            _run([*apt, "update"])
            _lists_updated = True
        _run([*apt, "install", "-y", "--no-install-recommends", *packages])
    if missing := _missing(commands):
        raise RuntimeError(f"apt-get installed {' '.join(packages)} but {', '.join(missing)} are still not on PATH")


def _missing(commands: tuple[str, ...]) -> list[str]:
    return [command for command in commands if shutil.which(command) is None]


def _run(command: list[str]) -> None:
    done = subprocess.run(
        command,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed with exit code {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def ensure_bubblewrap() -> None:
    """What the code sandbox runs commands with (rollout/agents/envs/code_sandbox.py)."""
    ensure_debian_packages("bubblewrap", "util-linux", commands=("bwrap", "setpriv", "prlimit"))


@pytest.fixture(scope="session")
def bubblewrap() -> None:
    """For a test module of the code sandbox's: `pytestmark = pytest.mark.usefixtures("bubblewrap")`."""
    ensure_bubblewrap()
