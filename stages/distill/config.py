"""The distillation stage's config: the student, its teachers and each teacher's prompt set."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

from data_contracts import CHAT_V1, PROMPT_V1
from rollout.agents.orchestrator import EpisodeSettings
from rollout.engine_settings import EngineSettings
from stages.common.agent_tasks import check_tasks
from stages.common.config import (
    ComputeSettings,
    MtpSettings,
    OptimizerSettings,
    RolloutRecordSettings,
    RouterBalancing,
    SamplingSettings,
    StageIO,
)
from stages.common.icepop import IcePopSettings
from stages.common.recipe import STAGE_DEFAULTS, STRICT, WARMUP_WITHIN_STEPS, nested


class TeacherSpec(BaseModel):
    """One teacher: a committed checkpoint and the datasets of the prompts it was trained on."""

    model_config = STRICT
    # Which stages teach is the pipeline's to say (flows/stage_table.py; the distill flow refuses any other):
    # to the trainer a source only names the teacher, its prompts, its engine's log and its metrics.
    source: str = Field(..., pattern=r"^[a-z][a-z0-9_]*$", description=(
        "The stage whose final checkpoint this is, e.g. sft or reasoning_rl: a stage that teaches."))
    checkpoint: str = Field(..., min_length=1, description="the teacher: STAGE:latest, a name in the store or a URI")
    datasets: list[str] = Field(..., min_length=1, description="chat@1 or prompt@1 datasets whose train prompts it scores")
    engines: EngineSettings = Field(EngineSettings(), description=(
        "the engines scoring with this teacher: started in the job on its checkpoint, or running ones made to serve it"))
    share: int = Field(1, ge=1, description="its prompts' share of every batch, relative to the other teachers'")
    agent_tasks: list[str] = Field(default_factory=list, description=(
        "Play this teacher's prompts as whole agent episodes against these tasks' services (the student "
        "samples every turn, the teacher scores every turn); default: the first reply only."))

    @field_validator("agent_tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[str]) -> list[str]:
        return check_tasks(tasks)


class DistillRecipe(BaseModel):
    """What a person or a preset tunes in distillation."""

    model_config = STRICT
    prompts_per_step: int = Field(24, ge=1, description="split over the teachers by their shares")
    max_steps: int = Field(20, ge=1, description="optimizer steps")
    optimizer: OptimizerSettings = nested(OptimizerSettings(lr=2e-5, warmup_steps=2))
    compute: ComputeSettings = nested(ComputeSettings())
    mtp: MtpSettings = nested(MtpSettings())
    router_balancing: RouterBalancing = nested(RouterBalancing(enabled=False), "MoE load balancing by the routers' "
                                               "biases: off in RL by default, as peers keep the router as SFT left it")
    routing_replay: bool = Field(False, description="train each token through the experts the student's engine "
                                                    "routed it to (R3) instead of recomputing them; either way each "
                                                    "step reports routing_agreement with it (MoE models)")
    sampling: SamplingSettings = nested(SamplingSettings())
    objective: IcePopSettings = nested(IcePopSettings())
    episode: EpisodeSettings = Field(EpisodeSettings(), description="turns and context management of the agent episodes")
    engines: EngineSettings = nested(EngineSettings())
    checkpoint_every: int = Field(20, ge=1, description="commit resume state every this many steps")
    record: RolloutRecordSettings = nested(RolloutRecordSettings())

    _stage_defaults = STAGE_DEFAULTS
    _warmup_within_steps = WARMUP_WITHIN_STEPS


class DistillConfig(DistillRecipe, StageIO):
    """On-policy distillation (SPEC Eq. 2): the student samples one response per prompt (G = 1), the
    prompt's own teacher scores it, and the per-token advantage is log π_teacher − log π_student."""

    stage_name: ClassVar[str] = "distill"
    entry_module: ClassVar[str] = "stages.distill.train"
    dataset_contract = CHAT_V1  # and prompt@1 (accepts_contract): general RL's prompts are prompt@1

    teachers: list[TeacherSpec] = Field(..., min_length=1, description="the checkpoints distilled into the student, each with its prompts")
    datasets: list[str] = Field(default_factory=list, description="Filled from the teachers' datasets.")
    data_seed: int = Field(0, description="the seed the suites were generated with (rebuilds search graphs)")

    @classmethod
    def accepts_contract(cls, contract_id: str | None) -> bool:
        return contract_id in (CHAT_V1.id, PROMPT_V1.id)

    @model_validator(mode="after")
    def _datasets_are_the_teachers(self):
        sources = [teacher.source for teacher in self.teachers]
        if len(set(sources)) != len(sources):
            raise ValueError(f"teachers: each source teaches once, got {sources}")
        taught = sorted({uri for teacher in self.teachers for uri in teacher.datasets})
        if self.datasets and sorted(self.datasets) != taught:
            raise ValueError(f"datasets {sorted(self.datasets)} differ from the teachers' datasets {taught}")
        self.datasets = taught
        return self
