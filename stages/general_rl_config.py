"""The general RL stage's config: GRPO + IcePop on prompt@1 datasets, scored by the mixed reward by default."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from data_contracts import PROMPT_V1
from stages.grpo_config import GrpoStageConfig, RewardSpec

# The instruct suite's rules: a reply that breaks one gets the minimum, otherwise the share met.
# Reward models join per domain (`domains.<domain>`) as further components of the same mix.
DEFAULT_MIX = {
    "gates": [{"path": "rewards.rules.InstructGate"}],
    "domains": {"instruct": [{"path": "rewards.rules.InstructSoft"}]},
}


class GeneralRlConfig(GrpoStageConfig):
    stage_name: ClassVar[str] = "general_rl"
    dataset_contract = PROMPT_V1

    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [RewardSpec(path="rewards.mix.MixedReward", params=DEFAULT_MIX)], min_length=1
    )
