"""The orchestrator's registry served over HTTP, with one local service process per agent task.

Used by the agentic stage, its evaluation and the tests: services start as child processes and
register themselves with the registry, exactly as services started elsewhere would.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from infra.ports import free_port
from rollout.agents.registry import TaskRegistry, registry_app
from rollout.process import EnvServiceProcess


class TaskServices:
    def __init__(self, shares: dict[str, float], workdir: Path, *, concurrency: dict[str, int] | None = None,
                 latency_median_s: float | None = None, latency_sigma: float = 1.0, start_services: bool = True):
        self.registry = TaskRegistry(shares, concurrency)
        self.workdir, self.start_services = Path(workdir), start_services
        self.latency_median_s, self.latency_sigma = latency_median_s, latency_sigma
        self.services: dict[str, EnvServiceProcess] = {}
        self._server: uvicorn.Server | None = None
        self.url = ""

    def start(self) -> TaskServices:
        port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{port}"
        self._server = uvicorn.Server(uvicorn.Config(registry_app(self.registry), host="127.0.0.1", port=port,
                                                     log_level="warning"))
        threading.Thread(target=self._server.run, name="orchestrator-registry", daemon=True).start()
        while not self._server.started:
            time.sleep(0.02)
        if self.start_services:
            for task in self.registry.entries:
                service = EnvServiceProcess(task, self.workdir / f"{task}-service.log", orchestrator=self.url,
                                            latency_median_s=self.latency_median_s, latency_sigma=self.latency_sigma)
                self.services[task] = service
                service.launch()
            for service in self.services.values():
                service.wait_ready()
        return self

    def stop(self) -> None:
        for service in self.services.values():
            service.stop()
        if self._server is not None:
            self._server.should_exit = True

    def __enter__(self) -> TaskServices:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
