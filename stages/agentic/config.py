"""The agentic RL stage's configuration: tasks and their services, engines, the async schedule, the loss."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from data_contracts import CHAT_V1, PROMPT_V1
from data_contracts.contract import Contract
from rollout.agents.orchestrator import EpisodeSettings
from rollout.engine_settings import EngineSettings
from stages.agentic.importance import ImportanceSettings
from stages.common.agent_tasks import check_tasks
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
from stages.common.recipe import STAGE_DEFAULTS, STRICT, WARMUP_WITHIN_STEPS, Seed, nested
from suites.prepare import TASK_ROW_SUITES


class AgenticRecipe(BaseModel):
    """What a person or a preset tunes in agentic RL."""

    model_config = STRICT
    tasks: dict[str, float] = Field(default_factory=lambda: {"search": 1.0, "calc": 1.0},
                                    description="each task's share of the rollout groups (a task name or dotted path)")
    concurrency: dict[str, int] = Field(default_factory=dict, description="rollouts at once per task (default 64)")
    group_size: int = Field(4, ge=2, description="G: rollouts per prompt")
    groups_per_step: int = Field(4, ge=1, description="groups of episodes per optimizer step")
    max_steps: int = Field(20, ge=1, description="optimizer steps")
    optimizer: OptimizerSettings = nested(OptimizerSettings(lr=5e-5, warmup_steps=2))
    compute: ComputeSettings = nested(ComputeSettings())
    mtp: MtpSettings = nested(MtpSettings())
    router_balancing: RouterBalancing = nested(RouterBalancing(enabled=False), "MoE load balancing by the routers' "
                                               "biases: off in RL by default, as peers keep the router as SFT left it")
    routing_replay: bool = Field(False, description="train each token through the experts the engine routed it to "
                                                    "(R3) instead of recomputing them; either way each step reports "
                                                    "routing_agreement with the engines (MoE models)")
    sampling: SamplingSettings = nested(SamplingSettings())
    episode: EpisodeSettings = nested(EpisodeSettings())
    objective: ImportanceSettings = nested(ImportanceSettings())
    push_every: int = Field(1, ge=1, description="K: optimizer steps between weight pushes to the engines")
    reset_optimizer_on_push: bool = Field(True, description="zero AdamW's moments after each push (SPEC); with "
                                                            "push_every 1 every step is then AdamW's first, "
                                                            "each weight moving by about lr")
    partial_credit_weight: float = Field(0.0, ge=0, description=(
        "trained reward = success + this × the task's partial credit, for tasks that grade progress "
        "(calc: the share of worked steps its calculator calls made); evaluation counts success only"))
    dynamic_sampling: DynamicSamplingSettings = nested(DynamicSamplingSettings())
    difficulty: DifficultySettings = nested(DifficultySettings())
    staleness_tau: int = Field(2, ge=0, description="τ: drop samples whose oldest weights are more than τ versions old")
    mode: Literal["async", "sync"] = Field("async", description="sync waits for every rollout of a batch before training")
    max_in_flight_groups: int = Field(16, ge=1, description="how far generation runs ahead of training (async)")
    engines: EngineSettings = nested(EngineSettings(replicas=2))
    env_latency_median_s: float | None = Field(None, gt=0, description="add a lognormal delay to every env step")
    env_latency_sigma: float = Field(1.0, ge=0, description="that delay's spread (the lognormal's sigma)")
    checkpoint_every: int = Field(10, ge=1, description="commit resume state every this many steps")
    record: RolloutRecordSettings = nested(RolloutRecordSettings())

    _stage_defaults = STAGE_DEFAULTS
    _warmup_within_steps = WARMUP_WITHIN_STEPS

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: dict[str, float]) -> dict[str, float]:
        check_tasks(list(tasks))
        return tasks


class AgenticRlConfig(AgenticRecipe, StageIO):
    stage_name: ClassVar[str] = "agentic_rl"
    entry_module: ClassVar[str] = "stages.agentic.train"

    data_seed: Seed = Field(0, description="the seed the suites were generated with (rebuilds search graphs)")

    @classmethod
    def accepts_contract(cls, contract_id: str | None) -> bool:
        """chat@1 suites, and prompt@1 task rows that carry their task's metadata (an imported Harbor dataset)."""
        return contract_id in (CHAT_V1.id, PROMPT_V1.id)

    @classmethod
    def suite_contract(cls, suite: str) -> Contract:
        """A code task's suite (swe, terminal) as its task rows, which carry the repository or folder its episodes
        need; the others (search, calc) as their conversations, which pose their episodes as they always have."""
        return PROMPT_V1 if suite in TASK_ROW_SUITES else CHAT_V1
