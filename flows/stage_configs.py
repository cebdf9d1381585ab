"""A stage's config as the pipeline makes it: the spec's section, the run's resolved datasets, store and
seed, the checkpoint it starts from, and a run id that names what determines its result."""

from __future__ import annotations

from data_contracts.lineage import config_digest, source_digest
from flows.spec import PipelineSpec, recipe_fields
from flows.stage_table import BY_NAME
from stages.common.config import StageIO
from stages.distill.config import DistillConfig, TeacherSpec
from stages.grpo.config import GeneralRlConfig, mix_with_orm

# The packages whose code decides a stage's result: the trainers, the model, rewards and rollouts, and
# the suites' answer checks and tool implementations the rewards and agent tasks use.
TRAINER_CODE = ("stages", "model", "rewards", "rollout", "suites")


def stage_run_id(stage: str, fields: dict, trainer_code: str | None = None) -> str:
    """The digest of what determines a stage's result (config, inputs, trainer code): an unchanged
    re-run resumes or skips, and a changed trainer trains anew. `trainer_code` defaults to the
    digest of the trainers' sources."""
    code = trainer_code or source_digest(*TRAINER_CODE)
    # Where the job runs (store, launcher) does not change what it computes.
    determining = {k: v for k, v in fields.items() if k not in ("store", "launch")} | {"code": code}
    return f"{stage}-{config_digest(determining)[:12]}"


def stage_fields(spec: PipelineSpec, stage: str, prepared: dict, init_checkpoint: str, **more) -> dict:
    """A stage config's fields: the spec's recipe, its resolved datasets, the run's store and seed, and
    where it runs (the section's launch, else the spec's)."""
    section = getattr(spec.stages, stage)
    datasets = {"datasets": prepared["stages"][stage]} if stage in prepared["stages"] else {}
    launch = (section.launch or spec.launch).model_dump(mode="json")
    # The seed the suites were generated with, for a stage that rebuilds what they were made from (search graphs).
    data_seed = {"data_seed": spec.seed} if "data_seed" in BY_NAME[stage].config.model_fields else {}
    return dict(recipe_fields(section), store=spec.store, seed=spec.seed, init_checkpoint=init_checkpoint,
                launch=launch, **datasets, **data_seed, **more)


def stage_config(spec: PipelineSpec, stage: str, prepared: dict, init_checkpoint: str,
                 trainer_code: str | None = None, **more) -> StageIO:
    fields = stage_fields(spec, stage, prepared, init_checkpoint, **more)
    return BY_NAME[stage].config(run_id=stage_run_id(stage, fields, trainer_code), **fields)


def general_rl_config(spec: PipelineSpec, prepared: dict, init_checkpoint: str,
                      orm_checkpoint: str | None = None) -> GeneralRlConfig:
    """With an ORM, the mix scores each general domain (the stage's datasets by name) with its sigmoid next to the rules."""
    if orm_checkpoint is None:
        return stage_config(spec, "general_rl", prepared, init_checkpoint)
    rewards = [{"path": "rewards.mix.MixedReward",
                "params": mix_with_orm(orm_checkpoint, tuple(spec.stages.general_rl.datasets), spec.store)}]
    return stage_config(spec, "general_rl", prepared, init_checkpoint, rewards=rewards)


def distill_config(spec: PipelineSpec, student: str, teachers: list[TeacherSpec]) -> DistillConfig:
    """Distillation's datasets are its teachers': the config names the teachers instead."""
    return stage_config(spec, "distill", {"stages": {}}, student,
                        teachers=[teacher.model_dump() for teacher in teachers])
