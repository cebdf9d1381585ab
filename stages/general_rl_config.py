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


def mix_with_orm(orm_checkpoint: str, domains: tuple[str, ...], store: str | None = None,
                 orm_weight: float = 0.5) -> dict:
    """DEFAULT_MIX with an ORM's sigmoid score as a further component of each of `domains`."""
    orm = {"path": "rewards.orm.OrmScore", "weight": orm_weight, "scale": "sigmoid",
           "params": {"checkpoint": orm_checkpoint, **({"store": store} if store else {})}}
    return {**DEFAULT_MIX, "domains": {domain: [*DEFAULT_MIX["domains"].get(domain, []), orm] for domain in domains}}


class GeneralRlConfig(GrpoStageConfig):
    stage_name: ClassVar[str] = "general_rl"
    dataset_contract = PROMPT_V1

    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [RewardSpec(path="rewards.mix.MixedReward", params=DEFAULT_MIX)], min_length=1
    )
    anchor_members: bool = Field(False, description="a prompt's reference reply joins its group as an off-policy "
                                                    "member, importance-weighted (stages/anchor_members.py)")
    anchor_min_weight: float = Field(0.05, gt=0, le=1, description="the floor of an anchor member's importance weight")
