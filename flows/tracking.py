"""A wandb run per trained stage: its config, every step's metrics, held-out metrics before and after,
and the checkpoint's lineage record attached as an artifact.

Offline by default (`WANDB_MODE=offline`, files under <workdir>/wandb, `wandb sync` uploads them
later); set `WANDB_MODE=online` and log in to stream to a server. The run id is the stage's run id,
which the checkpoint's lineage records as its `wandb_run`, so either one leads to the other.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from pathlib import Path

from data_contracts.lineage import Lineage
from stages.common.config import StageIO

PROJECT = os.environ.get("WANDB_PROJECT", "posttrain")


def wandb_run_id(config: StageIO) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", config.run_id)


def track_stage(stage: str, config: StageIO, history: list[dict], before: dict[str, float], after: dict[str, float],
                checkpoint: str, lineage: Lineage, workdir: Path) -> str:
    """Write the stage's wandb run; returns its path (project/id)."""
    import wandb  # imported here: a flow that never trains does not pay for it

    workdir.mkdir(parents=True, exist_ok=True)
    # One run id is one writer at a time: two pipelines that trained the same stage run take turns.
    with open(workdir / ".wandb.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _write_run(wandb, stage, config, history, before, after, checkpoint, lineage, workdir)


def _write_run(wandb, stage: str, config: StageIO, history: list[dict], before: dict[str, float],
               after: dict[str, float], checkpoint: str, lineage: Lineage, workdir: Path) -> str:
    run = wandb.init(project=PROJECT, id=wandb_run_id(config), name=config.run_id, job_type=stage, dir=str(workdir),
                     mode=os.environ.get("WANDB_MODE", "offline"), config=config.model_dump(mode="json"),
                     resume="allow", reinit="finish_previous")
    try:
        for record in history:
            run.log({key: value for key, value in record.items() if isinstance(value, (int, float))
                     and key not in ("step", "event")}, step=record["step"])
        run.summary.update({f"before/{name}": value for name, value in before.items()}
                           | {f"after/{name}": value for name, value in after.items()} | {"checkpoint": checkpoint})
        with tempfile.TemporaryDirectory() as tmp:
            record_path = Path(tmp) / "lineage.json"
            record_path.write_bytes(lineage.to_bytes())
            artifact = wandb.Artifact(f"lineage-{wandb_run_id(config)}", type="lineage",
                                      metadata={"checkpoint": checkpoint})
            artifact.add_file(str(record_path))
            run.log_artifact(artifact)
        return f"{PROJECT}/{run.id}"
    finally:
        run.finish()
