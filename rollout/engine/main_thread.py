"""The engine's torch work, run on the process's main thread while the HTTP server runs on another.

Measured here (bench/rollout_throughput.py, batch 64, 64 new tokens, CPU): the same engine decoding on
a worker thread of the server, after the model was loaded on the main thread, ran at 40-45% of its
in-process rate. Each thread that runs torch kernels gets its own OpenMP team, and two teams on the
same cores contend. So everything that computes — loading, generating, receiving weights — runs on the
one thread that loaded the model, and the HTTP server is the one that moves.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future


class MainThreadRunner:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future, Callable, tuple]] = queue.SimpleQueue()

    def submit(self, fn: Callable, *args) -> Future:
        """`fn(*args)` on the main thread, in submission order; its result or exception in the future."""
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def run_while(self, alive: threading.Thread) -> None:
        """Run jobs on the calling (main) thread until `alive` ends. A signal's exception (SystemExit,
        KeyboardInterrupt) is not a job's failure: it propagates and ends the process."""
        while alive.is_alive():
            try:
                future, fn, args = self._jobs.get(timeout=0.5)
            except queue.Empty:
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except Exception as error:  # the caller (an HTTP handler) turns it into a status
                future.set_exception(error)
