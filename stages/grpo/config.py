"""The GRPO stages' configs (reasoning RL, general RL): the Prefect form, the CLI flags and the run.json
the job reads. Both compose the same recipe; they differ in their data and their default rewards."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

from data_contracts import CHAT_V1, PROMPT_V1
from data_contracts.contract import Contract
from rewards.loading import RewardModuleError, check_reward_params
from rollout.engine_settings import EngineSettings
from stages.common.config import (
    ComputeSettings,
    DifficultySettings,
    DynamicSamplingSettings,
    MtpSettings,
    OptimizerSettings,
    RolloutRecordSettings,
    RouterBalancing,
    SamplingSettings,
    StageIO,
)
from stages.common.icepop import IcePopSettings
from stages.common.recipe import STAGE_DEFAULTS, STRICT, WARMUP_WITHIN_STEPS, nested
from suites.prepare import REFERENCE_ROW_SUITES


class RewardSpec(BaseModel):
    """A reward module by dotted path (`package.module.Name` or `package.module:Name`) and its weight."""

    model_config = STRICT
    path: str = Field(..., min_length=1, description="the reward module: package.module.Name or package.module:Name")
    weight: float = Field(1.0, description="its score's weight in the reward (the weighted sum)")
    params: dict = Field(default_factory=dict, description="keyword arguments the module is constructed with")

    @model_validator(mode="after")
    def _a_reward_module_that_takes_these_params(self):
        """A spec, a form or a run.json naming anything but a reward module, or params it does not take, is
        refused as it is read, by the check the trainer's load runs, not at the job's first scoring step;
        nothing is constructed either way."""
        try:
            check_reward_params(self.path, self.params)
        except RewardModuleError as error:
            raise ValueError(str(error)) from None
        return self


class AnchorSettings(BaseModel):
    """A prompt's reference reply joins its group as an off-policy member, importance-weighted
    (stages/grpo/anchors.py); general RL's prompts carry such replies."""

    model_config = STRICT
    enabled: bool = Field(False, description="reference replies join their groups")
    min_weight: float = Field(0.05, gt=0, le=1, description="the floor of an anchor member's importance weight")


class GrpoRecipe(BaseModel):
    """What a person or a preset tunes in a GRPO stage. Fully on-policy: sample G responses per prompt
    from the engine, one optimizer step on the Eq. 1 objective, push the weights back."""

    model_config = STRICT
    prompts_per_step: int = Field(8, ge=1, description="prompts per optimizer step (each sampled group_size times)")
    group_size: int = Field(8, ge=2, description="G: responses per prompt")
    oversample: int = Field(1, ge=1, description="each draw takes this many times the prompts still missing")
    dynamic_sampling: DynamicSamplingSettings = nested(DynamicSamplingSettings())
    difficulty: DifficultySettings = nested(DifficultySettings())
    max_steps: int = Field(40, ge=1, description="optimizer steps")
    optimizer: OptimizerSettings = nested(OptimizerSettings(lr=5e-5, warmup_steps=5))
    compute: ComputeSettings = nested(ComputeSettings())
    mtp: MtpSettings = nested(MtpSettings())
    router_balancing: RouterBalancing = nested(RouterBalancing(enabled=False), "MoE load balancing by the routers' "
                                               "biases: off in RL by default, as peers keep the router as SFT left it")
    routing_replay: bool = Field(False, description="train each token through the experts the engine routed it to "
                                                    "(R3) instead of recomputing them; either way each step reports "
                                                    "routing_agreement with the engine (MoE models)")
    shared_prompts: bool = Field(True, description="run each distinct prompt of a micro-batch once for all its "
                                                   "responses (the same loss and gradient up to float rounding, "
                                                   "fewer tokens); off under compute.activation_checkpointing, "
                                                   "whose recomputed layers have no KV cache")
    sampling: SamplingSettings = nested(SamplingSettings())
    objective: IcePopSettings = nested(IcePopSettings())
    rewards: list[RewardSpec] = Field(default_factory=list, description="default: the stage's own rewards")

    @field_validator("rewards", mode="before")
    @classmethod
    def _name_each_reward(cls, specs):
        """A form's or a spec's wrong reward path or params are named by their place (rewards[0].path) in one line."""
        for index, spec in enumerate(specs if isinstance(specs, list) else []):
            path = spec.get("path") if isinstance(spec, dict) else getattr(spec, "path", None)
            params = spec.get("params", {}) if isinstance(spec, dict) else getattr(spec, "params", {})
            if isinstance(path, str) and isinstance(params, dict):
                try:
                    check_reward_params(path, params)
                except RewardModuleError as error:
                    raise ValueError(f"rewards[{index}].{'params' if 'params' in str(error) else 'path'}: "
                                     f"{error}") from None
        return specs
    reward_timeout_s: float = Field(60.0, gt=0, description="seconds a reward module may take on a group")
    frozen: list[str] = Field(default_factory=list, description="globs of parameter names RL leaves as they are, "
                                                                 "e.g. '*.mlp.gate.weight' (the MoE routers)")
    engines: EngineSettings = nested(EngineSettings())
    checkpoint_every: int = Field(20, ge=1, description="commit resume state every this many steps")
    record: RolloutRecordSettings = nested(RolloutRecordSettings())

    _stage_defaults = STAGE_DEFAULTS
    _warmup_within_steps = WARMUP_WITHIN_STEPS


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


def default_general_rewards() -> list[RewardSpec]:
    """General RL's rewards when its config names none: the rules' mix (an ORM joins it in the pipeline)."""
    return [RewardSpec(path="rewards.mix.MixedReward", params=DEFAULT_MIX)]


class ReasoningRlConfig(GrpoRecipe, StageIO):
    """GRPO on prompts with reference answers (chat@1 or prompt@1 datasets), scored by verifiers
    (default: exact match)."""

    stage_name: ClassVar[str] = "reasoning_rl"
    entry_module: ClassVar[str] = "stages.grpo.reasoning"

    rewards: list[RewardSpec] = Field([RewardSpec(path="rewards.verifiers.ArithExactMatch")],
                                      description="reward modules by dotted path, their weights and parameters")

    @classmethod
    def accepts_contract(cls, contract_id: str | None) -> bool:
        return contract_id in (CHAT_V1.id, PROMPT_V1.id)

    @classmethod
    def suite_contract(cls, suite: str) -> Contract:
        """An embedded suite as its conversations (arith's replies state the answer), or as its prompt rows where
        only they carry the reference (code's hidden tests)."""
        return PROMPT_V1 if suite in REFERENCE_ROW_SUITES else CHAT_V1

    @model_validator(mode="after")
    def _default_rewards(self):
        if not self.rewards:
            self.rewards = [RewardSpec(path="rewards.verifiers.ArithExactMatch")]
        return self


class GeneralRlConfig(GrpoRecipe, StageIO):
    """GRPO on prompt@1 datasets, scored by the mixed reward by default (rewards/mix.py)."""

    stage_name: ClassVar[str] = "general_rl"
    entry_module: ClassVar[str] = "stages.grpo.general"
    dataset_contract = PROMPT_V1

    rewards: list[RewardSpec] = Field([RewardSpec(path="rewards.mix.MixedReward", params=DEFAULT_MIX)],
                                      description="reward modules by dotted path, their weights and parameters")

    anchors: AnchorSettings = nested(AnchorSettings())

    @model_validator(mode="after")
    def _default_rewards(self):
        if not self.rewards:
            self.rewards = default_general_rewards()
        return self
