"""Run a stage job from a flow: run.json in, streamed log lines and a live progress artifact out."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from infra.launch import LocalLauncher
from stages.events import parse_event


class JobProgress:
    """Forwards each job line to the run log and folds progress events into one progress artifact."""

    def __init__(self, stage: str):
        self.stage = stage
        self.logger = get_run_logger()
        self.artifact_id = create_progress_artifact(progress=0.0, description=f"{stage}: training progress")
        self.history: list[dict] = []
        self.percent_shown = 0
        self.final: dict | None = None

    def __call__(self, line: str) -> None:
        event = parse_event(line)
        if event is None:
            self.logger.debug(line)
            return
        kind = event["event"]
        if kind == "step":
            self.history.append(event)
            # Whole percents only: each update is an API call and a database write, and on a small
            # machine the Prefect server competes with the trainer for the same cores.
            percent = 100 * event["step"] // event["total"]
            if percent > self.percent_shown:
                self.percent_shown = percent
                update_progress_artifact(self.artifact_id, progress=float(percent))
            if event["step"] % 10 == 0 or "heldout_loss" in event:
                self.logger.info(
                    f"{self.stage} step {event['step']}/{event['total']} loss {event['loss']:.4f} "
                    f"({event['phase']})" + (f" held-out {event['heldout_loss']:.4f}" if "heldout_loss" in event else "")
                )
        else:
            self.logger.info(f"{self.stage} {kind}: {json.dumps({k: v for k, v in event.items() if k != 'event'})}")
        if kind == "done":
            self.final = event
            update_progress_artifact(self.artifact_id, progress=100.0)


def run_job(stage: str, module: str, config_json: str, workdir: Path, nproc: int) -> JobProgress:
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "run.json"
    config_path.write_text(config_json)
    progress = JobProgress(stage)
    LocalLauncher(nproc=nproc).run(module, config_path, progress)
    if progress.final is None:
        raise RuntimeError(f"{stage} job finished without reporting its checkpoint")
    return progress
