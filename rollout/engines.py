"""The one function that turns a stage's engine settings into a started fleet.

Every stage that samples (the policy of the RL stages and of distillation, distillation's teachers, the
evaluations) names its engines with `EngineSettings` (rollout/engine_settings.py): running ones (SGLang's router, or engines by URL) or
engines started here on a checkpoint (`backend`: the built-in engine, rollout/engine/server.py, or SGLang's own
server on GPUs, rollout/sglang_server.py). A
single engine is a fleet of one: callers get an `EngineFleet` either way, with one client
(rollout/fleet_client.py) and one way to make it serve new weights (`FleetClient.update_weights`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from model.precision import Precision
from rollout.client import EngineClient
from rollout.engine_settings import EngineSettings
from rollout.fleet_client import FleetClient
from rollout.process import EngineProcess, RouterProcess
from rollout.sglang_server import SglangServerProcess, require_cuda
from rollout.weight_push import FromDisk


@dataclass(frozen=True)
class EngineFleet:
    url: str  # SGLang's router, or the one engine of a fleet of one
    routed: bool
    started: bool  # started here on the checkpoint; else running engines, which may have served anything
    client: FleetClient

    def serve(self, checkpoint: str, version: str = "0") -> None:
        """Every engine of the fleet serves `checkpoint` as `version`."""
        self.client.update_weights(FromDisk(checkpoint, version))


def launch_engines(stack: ExitStack, settings: EngineSettings, checkpoint: str, log_dir: Path, *, seed: int,
                   weights_dirs: Sequence[Path] = (), precision: Precision = "auto", threads: int | None = None,
                   serve_checkpoint: bool = True) -> Callable[[], EngineFleet]:
    """Start the engines `settings` asks for on `checkpoint` (replica i seeded `seed + i`, allowed to load
    the trainer's pushes from `weights_dirs`), all stopped when `stack` closes, without waiting for them:
    each takes seconds to load, so callers start other work (task services, other fleets) meanwhile.
    Returns `ready()`, which waits for them and gives the fleet; running engines are made to serve
    `checkpoint` there unless `serve_checkpoint` is False (a rank that does not own them, a resumed run)."""
    require_cuda(settings)  # before any replica starts
    engines = [] if settings.running else [
        _launched(stack, _replica(settings, checkpoint, log_dir / f"engine-{i}.log", seed + i, weights_dirs,
                                  settings.precision or precision, settings.threads or threads))
        for i in range(settings.replicas)
    ]

    def ready() -> EngineFleet:
        if settings.router_url:
            url, routed = settings.router_url, True
        else:
            urls = list(settings.engine_urls) or [engine.wait_ready().base_url for engine in engines]
            if len(urls) == 1:
                url, routed = urls[0], False
                if settings.engine_urls:  # one we started answered already
                    EngineClient(url).wait_until_healthy(30)
            else:
                url, routed = stack.enter_context(RouterProcess(urls, log_dir / "router.log")), True
        client = FleetClient(url, routed=routed)
        stack.callback(client.close)
        fleet = EngineFleet(url, routed, started=not settings.running, client=client)
        if settings.running and serve_checkpoint:
            fleet.serve(checkpoint)
        return fleet

    return ready


def _replica(settings: EngineSettings, checkpoint: str, log_path: Path, seed: int, weights_dirs: Sequence[Path],
             precision: Precision, threads: int | None) -> EngineProcess | SglangServerProcess:
    if settings.backend == "sglang":
        return SglangServerProcess(settings, checkpoint, log_path, seed=seed, precision=precision)
    return EngineProcess(checkpoint, log_path, seed=seed, weights_dirs=list(weights_dirs), precision=precision,
                         threads=threads, **settings.decoding())


def _launched(stack: ExitStack, engine: EngineProcess | SglangServerProcess) -> EngineProcess | SglangServerProcess:
    stack.callback(engine.stop)
    engine.launch()
    return engine
