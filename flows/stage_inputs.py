"""What the pipeline calls each stage's flow with: its config and the rest of its arguments.

A stage starts from the latest checkpoint of the stages before it and is evaluated with its section's
settings; where its section sets a `difficulty_filter`, it reads its datasets filtered by that checkpoint's
pass rates (flows/difficulty_filter.py). Four stages need more of the run, and say what below: SFT (the
initial model evaluated as stage 0's output), the ORM (its trunk is the SFT checkpoint), general RL (the ORM
joins its rewards) and distillation (its teachers, and each teacher's evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from data_contracts.lineage import Lineage
from flows.difficulty_filter import filtered_datasets
from flows.sft import evaluate
from flows.spec import PipelineSpec
from flows.stage_configs import distill_config, general_rl_config, stage_config
from flows.stage_table import STAGES, STEPS, TEACHERS, Stage
from flows.teacher_domains import DistillEvalSettings
from infra.store import open_store
from stages.agentic.config import AgenticRecipe
from stages.common.config import StageIO
from stages.distill.config import TeacherSpec
from stages.grpo.config import RewardSpec


@dataclass
class PipelineRun:
    """What a run's stages are made of: its spec, its prepared data ({"stages", "evaluated",
    "init_checkpoint"}), {stage: checkpoint} so far ("init" the initial model), each stage's evaluation settings."""

    spec: PipelineSpec
    prepared: dict
    outputs: dict[str, str]
    evals: dict[str, Any]

    def latest(self, before: str) -> str:
        """The checkpoint of the last step before `before` that has one (the initial model at least)."""
        order = ("init", *STEPS)
        return next(self.outputs[s] for s in reversed(order[: order.index(before)]) if s in self.outputs)


FlowInputs = tuple[StageIO, dict[str, Any]]


def flow_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    """The config `stage`'s flow runs and its other arguments, made from what the run has so far. A stage whose
    datasets are filtered by difficulty reads the filtered ones, and the run keeps them as the stage's datasets:
    distillation's teacher of that stage teaches the prompts it trained on."""
    if getattr(getattr(run.spec.stages, stage.name), "difficulty_filter", None) is not None:
        datasets = run.prepared["stages"][stage.name]
        run.prepared["stages"][stage.name] = filtered_datasets(run.spec, stage.name, datasets, run.latest(stage.name))
    return STAGES_THAT_NEED_MORE.get(stage.name, latest_checkpoint_inputs)(stage, run)


def latest_checkpoint_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    config = stage_config(run.spec, stage.name, run.prepared, run.latest(stage.name))
    return config, {"eval_settings": run.evals[stage.name]}


def sft_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    # The initial checkpoint is stage 0's output and is evaluated with it; the SFT flow's "before" evaluation
    # then reads this committed eval back, so the SFT stage's time is its training and its own evaluation.
    evaluate(run.spec.store, run.outputs["init"], run.prepared["evaluated"], run.evals["sft"], ("sparse",))
    config, arguments = latest_checkpoint_inputs(stage, run)
    return config, arguments | {"datasets_by_suite": run.prepared["evaluated"]}


def orm_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    # The reward model's trunk is the SFT checkpoint: it has read the replies the ORM will judge.
    trunk = run.outputs.get("sft", run.latest(stage.serves))
    return stage_config(run.spec, stage.name, run.prepared, trunk), {}


def general_rl_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    config = general_rl_config(run.spec, run.prepared, run.latest(stage.name), run.outputs.get("orm"))
    return config, {"eval_settings": run.evals[stage.name]}


def distill_inputs(stage: Stage, run: PipelineRun) -> FlowInputs:
    """The student is the latest checkpoint; each teacher's domain is evaluated as its stage evaluates it."""
    general = run.outputs.get("general_rl")  # its domain is scored with the rewards it trained with
    eval_settings = DistillEvalSettings(**{name: run.evals[name] for name in TEACHERS},
                                        agentic_tasks=tuple(sorted(agentic_tasks(run.spec))),
                                        **({"general_rewards": recorded_rewards(run, general)} if general else {}))
    return distill_config(run.spec, run.latest(stage.name), distill_teachers(run)), {"eval_settings": eval_settings}


STAGES_THAT_NEED_MORE: dict[str, Callable[[Stage, PipelineRun], FlowInputs]] = {
    "sft": sft_inputs, "orm": orm_inputs, "general_rl": general_rl_inputs, "distill": distill_inputs}


def stage_evals(spec: PipelineSpec) -> dict[str, Any]:
    """Each stage's evaluation settings, with the run's seed; a stage the spec leaves out is measured (as
    distillation's teacher domain) with its defaults."""
    return {stage.name: replace(section.eval if (section := getattr(spec.stages, stage.name)) else stage.evaluation(),
                                seed=spec.seed)
            for stage in STAGES if stage.evaluation is not None}


def agentic_tasks(spec: PipelineSpec) -> list[str]:
    return list((spec.stages.agentic_rl or AgenticRecipe()).tasks)


def recorded_rewards(run: PipelineRun, checkpoint: str) -> list[RewardSpec]:
    """The rewards a checkpoint's stage trained with, as its lineage records them (also for a stage an
    earlier run trained: a run started past general RL)."""
    recorded = Lineage.model_validate(open_store(run.spec.store).open(checkpoint).lineage())
    return [RewardSpec(**reward) for reward in recorded.config["rewards"]]


def distill_teachers(run: PipelineRun) -> list[TeacherSpec]:
    """The final checkpoint of each stage that teaches and that the run has one of, with the datasets it
    trained on; the agentic teacher's prompts are played as whole episodes of its stage's tasks."""
    episodes = {"agentic_rl": sorted(agentic_tasks(run.spec))}
    return [TeacherSpec(source=source, checkpoint=run.outputs[source], datasets=run.prepared["stages"][source],
                        share=run.spec.teacher_share(source), agent_tasks=episodes.get(source, []))
            for source in run.spec.teacher_stages() if source in run.outputs and source in run.prepared["stages"]]
