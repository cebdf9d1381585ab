"""Children die with their parent, however the parent ends (SIGKILL and OOM included).

Every process we spawn is told its owner's pid (`POSTTRAIN_OWNER_PID`, set by `child_environment`);
our own entry points (stage jobs, engines, task services, the deployments' server) call
`exit_with_owner()`, which watches the owner through a pidfd (a process handle, immune to pid reuse)
and sends the process SIGTERM when the owner is gone, so it cleans up as on Ctrl-C, then exits hard
if that did not stop it. A torchrun in between is skipped: its workers watch the process that
launched torchrun, and torchrun exits when they do. Children that are not our code (the Prefect
server) get the kernel's parent-death signal instead (`die_with_parent` as `preexec_fn`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import sys
import threading
import time
from typing import NoReturn

OWNER_ENV = "POSTTRAIN_OWNER_PID"
TERM_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: ours) naming this process as the owner of the child about to start."""
    return {**(os.environ if env is None else env), OWNER_ENV: str(os.getpid())}


def environment_for_other_machines() -> dict[str, str]:
    """Our environment less the owner pid we were given: on another machine that pid names some other
    process, and a rank watching it would stop at once."""
    return {name: value for name, value in os.environ.items() if name != OWNER_ENV}


def die_with_parent() -> None:
    """`preexec_fn` for a child that is not our code: the kernel sends it SIGTERM when the thread that
    started it exits (so start such children from the main thread), and we exit at once if the parent
    is already gone."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def exit_with_owner() -> None:
    """Watch the owner named in the environment (no-op when started by hand) from a daemon thread."""
    owner = os.environ.get(OWNER_ENV)
    if not owner or int(owner) == os.getpid():
        return
    try:
        handle = os.pidfd_open(int(owner))
    except ProcessLookupError:
        _terminate_self(int(owner))
        return
    threading.Thread(target=_watch, args=(int(owner), handle), daemon=True, name="exit-with-owner").start()


def _watch(owner: int, handle: int) -> None:
    select.select([handle], [], [])  # a pidfd turns readable when its process has exited
    _terminate_self(owner)


def _terminate_self(owner: int) -> None:
    log.warning("owner process %d is gone; stopping", owner)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(TERM_GRACE_S)
    os._exit(1)  # SIGTERM was ignored or cleanup hung


def end_process(code: int | None = 0) -> NoReturn:
    """Exit at once with `code` (None: 0, as `sys.exit()`), the log and standard streams flushed, skipping
    the interpreter's teardown.

    For our entry points (stage jobs, engines) once their work is committed and their children stopped:
    tearing down the modules of torch and transformers takes 1.5 s of CPU per process (7.3 s → 5.8 s for
    a process that only imports a trainer), which each stage and engine stop would wait for. atexit
    handlers and the joins of non-daemon threads do not run: call it only where nothing is left for them."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code or 0)
