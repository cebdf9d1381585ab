"""The reasoning RL stage's config: the Prefect form, the CLI flags and the run.json the job reads."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from stages.grpo_config import GrpoStageConfig, RewardSpec


class ReasoningRlConfig(GrpoStageConfig):
    stage_name: ClassVar[str] = "reasoning_rl"

    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [RewardSpec(path="rewards.verifiers.ArithExactMatch")], min_length=1
    )
