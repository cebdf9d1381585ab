"""The pipeline's form: what `posttrain pipeline` takes as options and the pipeline deployment as its form."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The pipeline's stages in order (the ORM is trained as part of general RL's step).
StageName = Literal["sft", "reasoning_rl", "agentic_rl", "general_rl", "distill"]


class PipelineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = Field("tiny", description="Pipeline preset (flows/presets.py): model, data sizes, stage configs.")
    seed: int = Field(0, description="Seed for every stage.")
    store: str | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    reports_dir: str = Field("artifacts/runs", description="Run reports: RUN_ID/summary.json, report.md, LATEST.")
    nproc: int = Field(1, ge=1, description="Trainer processes per stage on this machine.")
    from_stage: StageName | None = Field(None, description="Start at this stage; the ones before it are not run.")
    to_stage: StageName | None = Field(None, description="Stop after this stage; the ones after it are not run.")
    init: str | None = Field(None, description="With from_stage: the committed checkpoint that stands for the "
                                               "output of the stage before it (for sft: the model SFT starts from).")

    @model_validator(mode="after")
    def _init_goes_with_from_stage(self):
        if self.init is not None and self.from_stage is None:
            raise ValueError("init is the checkpoint from_stage starts from: give from_stage too")
        if self.from_stage not in (None, "sft") and self.init is None:
            raise ValueError(f"from_stage {self.from_stage} needs init: the committed checkpoint to start from")
        stages = get_args(StageName)
        if self.from_stage and self.to_stage and stages.index(self.to_stage) < stages.index(self.from_stage):
            raise ValueError(f"to_stage {self.to_stage} comes before from_stage {self.from_stage}")
        return self
