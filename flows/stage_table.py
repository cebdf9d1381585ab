"""The pipeline's stages: ONE table, in pipeline order. Every list of stages derives from it: the pipeline
spec's sections and their order, the stages `--from-stage`/`--to-stage` name, the contract each stage's
datasets are published in, each stage's default evaluation, distillation's teachers and their evaluation
settings, the deployments `posttrain ui` serves. runbooks/add-a-stage.md shows what a new row needs.

Reading the table imports no Prefect and no evaluator: the spec, its schema and the CLI's options read it
on every command, so a row names its flow by import path and the flow is imported when it is run or served.
(Not flows/stages.py: Prefect loads a deployment's flow file with flows/ on sys.path, where a stages.py
would stand for the `stages` package.)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from data_contracts.contract import Contract
from stages.agentic.config import AgenticRecipe, AgenticRlConfig
from stages.common.config import StageIO
from stages.distill.config import DistillConfig, DistillRecipe
from stages.evaluation.settings import AgenticEvalSettings, EvalSettings, GeneralEvalSettings, SampledEvalSettings
from stages.grpo.config import GeneralRlConfig, GrpoRecipe, ReasoningRlConfig
from stages.orm.config import OrmRecipe, TrainOrmConfig
from stages.sft.config import SftConfig, SftRecipe

if TYPE_CHECKING:
    from prefect import Flow


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline. Its name and the contract its datasets are read as are its config's
    (`stage_name`, `dataset_contract`), so the row does not repeat them.

    recipe      what a person or a preset tunes: the fields of its section of the spec
    config      the recipe plus where it reads and writes (StageIO): its flow's form and its job's run.json
    flow        its Prefect flow, "module:function": called with its config, and `eval_settings` where it has
                an evaluation (flows/stage_inputs.py); it returns a StageResult
    evaluation  its held-out evaluation's settings (the section's `eval`, and how distillation measures its
                domain when it teaches); None: it has no evaluation of its own
    teaches     its final checkpoint can be one of distillation's teachers
    share       a teacher's share of each distillation batch unless the spec's `shares` says otherwise; 0: it
                teaches only where a spec gives it a share (SFT: GLM-5 distils from it, the tuned presets do not)
    serves      the stage it makes rewards for: it runs with that stage, just before it, and its checkpoint
                is a reward model, not the policy the next stage starts from
    filters_by_difficulty  its datasets are RL prompts with answers to verify: the section's `difficulty_filter`
                can keep only those the checkpoint it starts from sometimes fails (flows/difficulty_filter.py)
    """

    recipe: type[BaseModel]
    config: type[StageIO]
    flow: str
    evaluation: type | None = None
    teaches: bool = False
    share: int = 1
    serves: str | None = None
    filters_by_difficulty: bool = False

    def __post_init__(self):
        if not issubclass(self.config, self.recipe):
            raise TypeError(f"{self.config.__name__} is not made of the recipe {self.recipe.__name__}")

    @property
    def name(self) -> str:
        """The stage's name: its section of the spec and the folder its checkpoints go to."""
        return self.config.stage_name

    @property
    def contract(self) -> Contract:
        """What its datasets are read as: a spec's embedded suite is published in it for this stage."""
        return self.config.dataset_contract

    @property
    def learns_from_teachers(self) -> bool:
        """Distillation: its prompts are its teachers' datasets, so it names teachers instead of datasets."""
        return "teachers" in self.config.model_fields

    def load_flow(self) -> Flow:
        module, _, name = self.flow.partition(":")
        return getattr(importlib.import_module(module), name)


STAGES: tuple[Stage, ...] = (
    Stage(SftRecipe, SftConfig, "flows.sft:sft", EvalSettings, teaches=True, share=0),
    Stage(GrpoRecipe, ReasoningRlConfig, "flows.reasoning_rl:reasoning_rl", SampledEvalSettings, teaches=True,
          filters_by_difficulty=True),
    Stage(AgenticRecipe, AgenticRlConfig, "flows.agentic_rl:agentic_rl", AgenticEvalSettings, teaches=True),
    Stage(OrmRecipe, TrainOrmConfig, "flows.train_orm:train_orm", serves="general_rl"),
    Stage(GrpoRecipe, GeneralRlConfig, "flows.general_rl:general_rl", GeneralEvalSettings, teaches=True),
    Stage(DistillRecipe, DistillConfig, "flows.distill:distill"),
)
BY_NAME = {stage.name: stage for stage in STAGES}
# The pipeline's steps, which `from_stage` and `to_stage` name: a stage that serves another runs in its step.
STEPS = tuple(stage.name for stage in STAGES if stage.serves is None)
# The stages whose final checkpoints can teach in distillation, in pipeline order.
TEACHERS = tuple(stage.name for stage in STAGES if stage.teaches)


def previous_step(name: str) -> str:
    """The step whose checkpoint the step `name` starts from ("init": the initial model)."""
    return ("init", *STEPS)[STEPS.index(name)]
