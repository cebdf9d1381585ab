"""What every on-policy stage is configured with (GRPO + IcePop: reasoning and general RL; distillation): the Prefect form's fields."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stages.stage_inputs import StageIO


class RewardSpec(BaseModel):
    """A reward module by dotted path (`package.module.Name` or `package.module:Name`) and its weight."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(..., min_length=1)
    weight: float = 1.0
    params: dict = Field(default_factory=dict)


class OnPolicyConfig(StageIO):
    """The knobs of every fully on-policy stage (GRPO + IcePop, on-policy distillation): sample from the
    engine, one optimizer step on the Eq. 1 objective, push the weights back."""

    prompts_per_step: int = Field(8, ge=1)
    max_steps: int = Field(40, ge=1)
    lr: float = Field(5e-5, gt=0)
    warmup_steps: int = Field(5, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2] = 0
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int = Field(64, ge=1)
    beta: float = Field(2.0, gt=1, description="IcePop band: 1/β ≤ π_train/π_infer ≤ β")
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    engine_url: str | None = Field(None, description="A running engine (ours or SGLang); default: start one here.")
    checkpoint_every: int = Field(20, ge=1)

    def prompts_per_rank(self, world_size: int) -> int:
        if self.prompts_per_step % world_size:
            raise ValueError(f"prompts_per_step {self.prompts_per_step} does not split over {world_size} ranks")
        return self.prompts_per_step // world_size


class GrpoStageConfig(OnPolicyConfig):
    """A stage's own defaults for `rewards` come with the stage's config class."""

    rewards: list[RewardSpec] = Field(..., min_length=1)
    reward_timeout_s: float = Field(60.0, gt=0)
    group_size: int = Field(8, ge=2, description="G: responses per prompt")
    oversample: int = Field(1, ge=1, description="draw this many times the prompts, train on the groups with signal")
    frozen: list[str] = Field(default_factory=list, description="globs of parameter names RL leaves as they are, "
                                                                 "e.g. '*.mlp.gate.weight' (the MoE routers)")
    top_p: float = Field(1.0, gt=0, le=1)
