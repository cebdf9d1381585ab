"""Start a rollout engine, SGLang's router or an agent task service as its own process on this machine, and stop it again."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import requests

from infra.lifetime import child_environment, die_with_parent
from infra.ports import free_port
from rollout.auth import bearer_headers
from rollout.client import EngineClient, EngineUnavailableError
from rollout.engine_starts import record_engine_start


class ServiceProcess:
    """`python -m MODULE ARGS --host H --port P` as a child process, up once `GET /health` answers."""

    def __init__(self, module: str, args: list[str], log_path: Path, *, host: str = "127.0.0.1",
                 startup_timeout_s: float = 120.0, foreign: bool = False, env: dict[str, str] | None = None):
        """`foreign`: the module is not our code (SGLang's server), so it cannot watch its owner itself: the
        kernel sends it SIGTERM when the thread that started it ends. `env`: variables set for it on top of ours."""
        self.module, self.args, self.log_path, self.host = module, args, Path(log_path), host
        self.startup_timeout_s, self.foreign, self.env = startup_timeout_s, foreign, dict(env or {})
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.launched_at = 0.0
        self.start_recorded = False  # an engine's start, on the run's ledger once (rollout/engine_starts.py)

    def start(self) -> str:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Spawn the process without waiting for it: several can then import and load side by side."""
        port = free_port(self.host)
        self.url = f"http://{self.host}:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args, "--host", self.host, "--port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, env=child_environment() | self.env,
                preexec_fn=die_with_parent if self.foreign else None,
            )
        self.launched_at = time.monotonic()
        self._deadline = self.launched_at + self.startup_timeout_s

    def wait_ready(self) -> str:
        """The launched process's URL once it answers `GET /health`; stopped and named if it never does."""
        deadline = self._deadline
        while True:
            try:
                requests.get(f"{self.url}/health", timeout=5, headers=bearer_headers()).raise_for_status()
                return self.url
            except requests.RequestException as error:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise EngineUnavailableError(
                        f"{self.module} at {self.url} did not come up: {error}; log: {self.log_path}, ending:\n"
                        f"{log_tail(self.log_path)}") from error
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class EngineProcess:
    """`with EngineProcess(uri, log_path) as client:` serves `uri` until the block ends."""

    def __init__(self, checkpoint: str, log_path: Path, *, seed: int = 0, host: str = "127.0.0.1",
                 startup_timeout_s: float = 120.0, weights_dirs: Sequence[Path] = (), precision: str = "auto",
                 threads: int | None = None, speculative_steps: int = 0, speculative_max_rows: int | None = None):
        """`weights_dirs`: the local folders its `update_weights` may load from (where a trainer pushes);
        `precision`: the served weights' dtype (rollout.engine.server's --precision); `threads`: its CPU threads
        (default one per core: give fewer when it shares the cores with a trainer or other engines);
        `speculative_steps`: MTP draft tokens per decoding step (0: none), once at most `speculative_max_rows` rows
        of a batch decode (None: always)."""
        args = ["--checkpoint", checkpoint, "--seed", str(seed), "--precision", precision]
        if speculative_steps:
            args += ["--speculative-num-steps", str(speculative_steps)]
        if speculative_max_rows is not None:
            args += ["--speculative-max-rows", str(speculative_max_rows)]
        if threads:
            args += ["--threads", str(threads)]
        for folder in weights_dirs:
            args += ["--weights-dir", str(folder)]
        self.service = ServiceProcess("rollout.engine.server", args, log_path, host=host, startup_timeout_s=startup_timeout_s)
        self.checkpoint = checkpoint
        self.downloads: Path | None = None

    @property
    def url(self) -> str:
        return self.service.url

    def start(self) -> EngineClient:
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        # The engine removes its downloads folder when it exits; naming it here lets stop() remove it
        # also after a SIGKILL, when the engine could not.
        self.downloads = Path(tempfile.gettempdir()) / f"posttrain-engine-{uuid.uuid4().hex}"
        self.service.args = [*self.service.args, "--workdir", str(self.downloads)]
        self.service.launch()

    def wait_ready(self) -> EngineClient:
        return ready_client(self.service, self.stop, self.checkpoint)

    def stop(self) -> None:
        stop_serving(self.service, self.downloads)

    def __enter__(self) -> EngineClient:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def ready_client(service: ServiceProcess, stop: Callable[[], None], checkpoint: str) -> EngineClient:
    """A client of the engine `service` once it answers, its start on the run's ledger (rollout/engine_starts.py) the
    first time; `stop` runs if it never does or the wait is interrupted."""
    try:
        client = EngineClient(service.wait_ready())
    except BaseException:
        stop()
        raise
    if not service.start_recorded:
        service.start_recorded = True
        record_engine_start(checkpoint, time.monotonic() - service.launched_at)
    return client


def stop_serving(service: ServiceProcess, downloads: Path | None) -> None:
    """Stop an engine's process and remove the folder its checkpoint was downloaded to (it cannot after a SIGKILL)."""
    service.stop()
    if downloads is not None:
        shutil.rmtree(downloads, ignore_errors=True)


class EnvServiceProcess(ServiceProcess):
    """An agent task service (rollout/agents/envs/service.py), registering with `orchestrator` when given."""

    def __init__(self, task: str, log_path: Path, *, orchestrator: str | None = None,
                 latency_median_s: float | None = None, latency_sigma: float = 1.0, host: str = "127.0.0.1"):
        args = ["--task", task]
        if orchestrator:
            args += ["--orchestrator", orchestrator]
        if latency_median_s:
            args += ["--latency-median-s", str(latency_median_s), "--latency-sigma", str(latency_sigma)]
        super().__init__("rollout.agents.envs.service", args, log_path, host=host, startup_timeout_s=60.0)


class RouterProcess(ServiceProcess):
    """SGLang's router (rollout/router.py) in front of `worker_urls`."""

    def __init__(self, worker_urls: Sequence[str], log_path: Path, *, host: str = "127.0.0.1",
                 health_check_interval_s: int = 1):
        metrics_port = free_port(host)
        self.metrics_url = f"http://{host}:{metrics_port}/metrics"  # the router's Prometheus endpoint
        args = [arg for url in worker_urls for arg in ("--worker-url", url)]
        args += ["--metrics-port", str(metrics_port), "--health-check-interval-s", str(health_check_interval_s)]
        super().__init__("rollout.router", args, log_path, host=host, startup_timeout_s=60.0)
        self.worker_urls = list(worker_urls)

    def wait_ready(self) -> str:
        """Up once the router answers and lists every worker healthy (it registers them after it starts)."""
        url = super().wait_ready()
        while True:
            listed = requests.get(f"{url}/workers", timeout=5, headers=bearer_headers()).json().get("workers", [])
            healthy = {worker["url"] for worker in listed if worker["is_healthy"]}
            if healthy >= set(self.worker_urls):
                return url
            if self.process.poll() is not None or time.monotonic() > self._deadline:
                self.stop()
                raise EngineUnavailableError(f"SGLang's router at {url} lists {sorted(healthy)} healthy, not "
                                             f"{self.worker_urls}; log: {self.log_path}")
            time.sleep(0.2)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def log_tail(path: Path, characters: int = 2000) -> str:
    """The end of a service's log, for an error that says why it stopped (the log may go with its job's folder)."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, 2) - characters))
            return log.read().decode("utf-8", "replace")
    except OSError as error:
        return f"(unreadable: {error})"
