"""The agentic RL stage's configuration: tasks and their services, engines, the async schedule, the loss."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from stages.stage_inputs import StageIO

# Which agent task poses a suite's rows: arithmetic becomes tool-integrated (a calculator is offered).
TASK_OF_SUITE = {"search": "search", "calc": "calc"}


class AgenticRlConfig(StageIO):
    stage_name: ClassVar[str] = "agentic_rl"

    tasks: dict[str, float] = Field(default_factory=lambda: {"search": 1.0, "calc": 1.0},
                                    description="each task's share of the rollout groups")
    concurrency: dict[str, int] = Field(default_factory=dict, description="rollouts at once per task (default 64)")
    data_seed: int = Field(0, description="the seed the suites were generated with (rebuilds search graphs)")
    group_size: int = Field(4, ge=2, description="G: rollouts per prompt")
    groups_per_step: int = Field(4, ge=1)
    max_steps: int = Field(20, ge=1)
    lr: float = Field(5e-5, gt=0)
    warmup_steps: int = Field(2, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2] = 0
    push_every: int = Field(1, ge=1, description="K: optimizer steps between weight pushes to the engines")
    reset_optimizer_on_push: bool = Field(True, description="zero AdamW's moments after each push (SPEC)")
    staleness_tau: int = Field(2, ge=0, description="τ: drop samples whose oldest weights are more than τ versions old")
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(64, ge=1, description="per turn")
    max_turns: int = Field(6, ge=1)
    max_context: int = Field(1024, ge=64)
    keep_recent: int = Field(5, ge=0, description="keep-recent-k: tool results older than k rounds become a placeholder")
    discard_above: int = Field(900, ge=64, description="discard-all: past this many tokens the tool history is dropped")
    mode: Literal["async", "sync"] = Field("async", description="sync waits for every rollout of a batch before training")
    max_in_flight_groups: int = Field(16, ge=1, description="how far generation runs ahead of training (async)")
    replicas: int = Field(2, ge=1, description="engine replicas started here when engine_urls is empty")
    engine_urls: list[str] = Field(default_factory=list, description="running engines (ours or SGLang)")
    env_latency_median_s: float | None = Field(None, gt=0, description="add a lognormal delay to every env step")
    env_latency_sigma: float = Field(1.0, ge=0)
    checkpoint_every: int = Field(10, ge=1)

    @model_validator(mode="after")
    def _known_tasks(self):
        unknown = set(self.tasks) - set(TASK_OF_SUITE.values())
        if unknown:
            raise ValueError(f"unknown tasks {sorted(unknown)}; known: {sorted(TASK_OF_SUITE.values())}")
        return self
