"""The forms a training lead fills in: each is also the exact config the stage job reads."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from stages.sft_config import DsaSchedule, SftConfig
from stages.stage_inputs import Provenance

__all__ = ["DsaSchedule", "PipelineParams", "Provenance", "SftConfig"]


class PipelineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = Field("tiny", description="Pipeline preset (flows/presets.py): model, data sizes, stage configs.")
    seed: int = 0
    store: str | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    reports_dir: str = Field("artifacts/runs", description="Run reports: <run_id>/summary.json, report.md, LATEST.")
    nproc: int = Field(1, ge=1, description="Trainer processes per stage on this machine.")
