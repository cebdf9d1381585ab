"""`posttrain ui`: a local Prefect server with the UI, and every stage and the pipeline served as deployments.

Two child processes: `prefect server start` on the given host and port, then, once its API answers,
`python -m flows.serve` pointed at it, which registers the deployments and executes the runs a training
lead creates from the UI's Run form. Ctrl-C stops both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests


class UiError(RuntimeError):
    pass


def start_logged(argv: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for_api(api: str, server: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise UiError(f"the Prefect server exited with {server.returncode}; log: {log_path}")
        try:
            if requests.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise UiError(f"the Prefect server did not answer at {api} within {timeout_s:.0f} s; log: {log_path}")


def serve_ui(host: str, port: int, flows: list[str], log_dir: Path, on_ready: Callable[[str], None],
             startup_timeout_s: float = 120.0) -> int:
    """Run the server and the deployments until interrupted or until either exits; returns an exit code."""
    # Ctrl-C and SIGTERM stop the command even where it was started with SIGINT ignored (a shell's
    # background job), which would leave Python without its KeyboardInterrupt handler.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _interrupt)
    api = f"http://{host}:{port}/api"
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_UI_API_URL": api, "PREFECT_SERVER_API_HOST": host,
           "PREFECT_SERVER_API_PORT": str(port)}
    prefect = str(Path(sys.executable).with_name("prefect"))
    server_log, serve_log = log_dir / "prefect-server.log", log_dir / "deployments.log"
    server = start_logged([prefect, "server", "start", "--host", host, "--port", str(port)], env, server_log)
    deployments = None
    try:
        wait_for_api(api, server, server_log, startup_timeout_s)
        deployments = start_logged([sys.executable, "-m", "flows.serve", "--only", *flows], env, serve_log)
        on_ready(f"http://{host}:{port}")
        while server.poll() is None and deployments.poll() is None:
            time.sleep(1)
        failed = "the Prefect server" if server.poll() is not None else "the deployments"
        raise UiError(f"{failed} stopped; logs: {server_log}, {serve_log}")
    except KeyboardInterrupt:
        return 0
    finally:
        stop_all([p for p in (deployments, server) if p is not None])


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def stop_all(processes: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM to all at once, then SIGKILL to whatever still runs after `grace_s`."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
