"""`posttrain ui`: a local Prefect server with the UI, and every stage and the pipeline served as deployments.

Two child processes: `prefect server start` on the given host and port, then, once its API answers,
`python -m flows.serve` pointed at it, which registers the deployments and executes the runs a training
lead creates from the UI's Run form. Ctrl-C stops both.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from infra.lifetime import child_environment, die_with_parent
from infra.ports import free_port
from posttrain import prefect_db


class UiError(RuntimeError):
    pass


def start_logged(argv: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    """A child that stops when this process ends, however it ends (the Prefect server is not our code,
    so the kernel's parent-death signal; our own children also watch us themselves)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, env=child_environment(env), stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)


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
             startup_timeout_s: float = 120.0, auth_string: str | None = None) -> int:
    """Run the server and the deployments until interrupted or until either exits; returns an exit code.

    With `auth_string` ("user:password") every API route but the health check takes HTTP basic auth
    (Prefect's own `server.api.auth_string`; the UI asks for it once), and the deployments send it."""
    if auth_string:
        user, colon, password = auth_string.partition(":")
        if not (colon and user and password):
            raise UiError("--auth-string must be USER:PASSWORD with neither empty (Prefect's basic auth): "
                          "an empty user or password would let anyone in")
    if not _is_loopback(host) and not auth_string:
        raise UiError(f"--host {host} exposes the Prefect API beyond this machine: set --auth-string "
                      "(or PREFECT_SERVER_API_AUTH_STRING) so that it takes a password")
    # Ctrl-C and SIGTERM stop the command even where it was started with SIGINT ignored (a shell's
    # background job), which would leave Python without its KeyboardInterrupt handler.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _interrupt)
    api = f"http://{host}:{port}/api"
    # The UI shows this project's runs, not every Prefect process's on the machine: its own database
    # under the working directory unless PREFECT_HOME says otherwise.
    home = os.environ.get("PREFECT_HOME") or str(Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")).resolve() / "prefect")
    Path(home).mkdir(parents=True, exist_ok=True)  # SQLite creates the database file, not its folder
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_UI_API_URL": api, "PREFECT_SERVER_API_HOST": host,
           "PREFECT_SERVER_API_PORT": str(port), "PREFECT_HOME": home}
    # The deployments look for new runs every 2 s instead of Prefect's 10: with 10, a run submitted from
    # the form waited 3-13 s of the ~25 s from Submit to a smoke SFT's first step for its runner to see it.
    env.setdefault("PREFECT_RUNNER_POLL_FREQUENCY", "2")
    if auth_string:
        env |= {"PREFECT_SERVER_API_AUTH_STRING": auth_string, "PREFECT_API_AUTH_STRING": auth_string}
    prefect = str(Path(sys.executable).with_name("prefect"))
    server_log, serve_log = log_dir / "prefect-server.log", log_dir / "deployments.log"
    server = deployments = None
    try:
        with prefect_db.default_database(Path(home)):
            server = start_logged([prefect, "server", "start", "--host", host, "--port", str(port)], env, server_log)
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


@contextmanager
def prefect_api(log_dir: Path, startup_timeout_s: float = 120.0) -> Iterator[None]:
    """The Prefect API a CLI command runs its flows against: `PREFECT_API_URL` when set, else a server of
    our own on a free loopback port for the command's lifetime. Prefect's own temporary server would do,
    but it is Prefect's child, not ours, and outlived a killed pipeline every time; this one is the same
    app (Prefect's server factory under uvicorn, without the UI) started as a child that dies with us."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    if PREFECT_API_URL.value():
        yield
        return
    import prefect

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    log_path = log_dir / "prefect-server.log"
    home = Path(PREFECT_HOME.value())
    # The server's home is the one whose database was seeded and locked here, wherever the setting came from.
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT_HOME": str(home)}
    home.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        # Two commands starting servers on one database (two pipelines on one machine) would migrate a new
        # database at once and one would die on "duplicate column": they start one after the other.
        with open(home / ".posttrain-server-start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with prefect_db.default_database(home):
                server = start_logged([sys.executable, "-m", "uvicorn", "--app-dir",
                                       str(Path(prefect.__file__).parent.parent), "--factory",
                                       "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
                                       str(port), "--log-level", "error", "--lifespan", "on"], env, log_path)
                wait_for_api(api, server, log_path, startup_timeout_s)
        with temporary_settings(updates={PREFECT_API_URL: api}):
            try:
                yield
            finally:
                from prefect.logging.handlers import APILogWorker

                APILogWorker.drain_all(timeout=10)  # the run's last log lines, before their server goes
    finally:
        stop_all([server] if server is not None else [])


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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
