"""Run a stage job as a real subprocess, as a flow does, and keep its progress events."""

from pathlib import Path

from infra import launch
from infra.launchers.local import LocalLaunch
from stages.common.config import StageIO
from stages.common.events import parse_event


def run_stage_job(module: str, config: StageIO, workdir: Path) -> list[dict]:
    path = workdir / "run.json"
    path.write_text(config.model_dump_json())
    events = []
    launch.run_stage_job(LocalLaunch(nproc=1, threads_per_proc=1), module, path,
                                                   lambda line: (e := parse_event(line)) and events.append(e))
    return events
