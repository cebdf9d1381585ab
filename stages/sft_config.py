"""The SFT stage's one config object: the Prefect form, the CLI flags and the run.json the job reads."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stages.stage_inputs import StageIO

ThinkingMode = Literal["interleaved", "preserved", "off"]


class DsaSchedule(BaseModel):
    """GLM-5's DSA training, in three phases by optimizer step.

    1. dense: DSA not yet switched on: the model trains alone with dense (SDPA) attention and the
       indexer is not run, as GLM-5's model was trained before its DSA adaptation.
    2. indexer warm-up: the main model's learning rate is 0 — only the indexer learns
       KL(dense attention ‖ softmax(I)) on detached inputs.
    3. sparse: attention restricted to the indexer's top-k; indexer loss restricted to the selected keys.
    """

    model_config = ConfigDict(extra="forbid")
    dense_steps: int = Field(200, ge=0)
    indexer_warmup_steps: int = Field(40, ge=0)
    indexer_lr: float = Field(3e-3, gt=0)
    indexer_loss_weight: float = Field(1.0, ge=0)


class SftConfig(StageIO):
    stage_name: ClassVar[str] = "sft"

    thinking_mix: dict[ThinkingMode, float] = Field(
        default_factory=lambda: {"interleaved": 0.6, "preserved": 0.2, "off": 0.2}
    )
    max_seq_len: int = Field(512, ge=16)
    global_batch_size: int = Field(32, ge=1)
    max_steps: int = Field(600, ge=1)
    lr: float = Field(3e-3, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(30, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2] = 0
    eval_every: int = Field(100, ge=1, description="Held-out loss every this many steps.")
    eval_samples: int = Field(128, ge=1)
    checkpoint_every: int = Field(100, ge=1, description="Commit resume state every this many steps.")
    dsa: DsaSchedule = Field(default_factory=DsaSchedule)

    @model_validator(mode="after")
    def _check(self) -> "SftConfig":
        if abs(sum(self.thinking_mix.values()) - 1.0) > 1e-6:
            raise ValueError(f"thinking_mix must sum to 1, got {sum(self.thinking_mix.values())}")
        return self
