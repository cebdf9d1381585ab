"""The distillation flow: each teacher's domain scored for the teacher and for the student before and
after, the training job between, and what the student keeps of each teacher."""

from __future__ import annotations

from contextlib import ExitStack

from prefect import flow, task

from flows.cards import publish_retention_table, publish_stage
from flows.engine_pool import leased_engines
from flows.eval_log import logged
from flows.job import (
    evaluation_engines,
    named_by_its_run_id,
    runs_here,
    train_stage,
    with_flow_provenance,
    with_shared_engine,
)
from flows.results import StageResult, Trained
from flows.stage_checks import validate_stage_inputs
from flows.teacher_domains import DistillEvalSettings, check_teacher_sources, domain_metrics, headline, with_run_seeds
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.distill.config import DistillConfig, TeacherSpec


@task
def train_distill(config: DistillConfig) -> Trained:
    return train_stage(config)


@task
def evaluate_domain(store_root: str | None, checkpoint: str, teacher: TeacherSpec, settings: DistillEvalSettings,
                    engines: EngineSettings) -> dict[str, float]:
    """`checkpoint` on the held-out split of `teacher`'s domain, as the teacher's stage evaluates it."""
    return logged(checkpoint, domain_metrics(open_store(store_root), checkpoint, teacher, settings, engines))


def with_pooled_teachers(stack: ExitStack, config: DistillConfig) -> DistillConfig:
    """Inside a pipeline, each teacher that the job would start one engine for scores on an engine of the run's
    pool serving its checkpoint (flows/engine_pool.py): the engine its stage's evaluation after used, where kept."""
    if not runs_here(config) or open_store(config.store).is_committed(config.output_name):
        return config
    teachers = []
    for teacher in config.teachers:
        settings = teacher.engines
        if not settings.running and settings.replicas == 1 and settings.backend == "builtin":
            leased = stack.enter_context(leased_engines(teacher.checkpoint, exclusive=False,
                                                        precision=settings.precision or config.compute.precision))
            if leased is not None:
                teacher = teacher.model_copy(update={"engines": settings.model_copy(
                    update={"engine_urls": leased.engine_urls})})
        teachers.append(teacher)
    return config.model_copy(update={"teachers": teachers})


def by_teacher(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{source}/{name}": value for source, named in metrics.items() for name, value in named.items()}


@flow(name="distill", log_prints=True, on_failure=[named_by_its_run_id])
def distill(config: DistillConfig, eval_settings: DistillEvalSettings | None = None) -> StageResult:
    """On-policy distillation of every teacher into the student; per teacher domain: the teacher's score,
    the student's before and after, and the share of the teacher's score the student keeps.

    Args:
        config: the distillation run: the student's init checkpoint, its teachers with their domains, compute.
        eval_settings: how each teacher domain is scored for the teacher and the student before and after.
    """
    check_teacher_sources(config.teachers)
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "distill")
    eval_settings = with_run_seeds(eval_settings or DistillEvalSettings(), config.seed, config.data_seed)
    with ExitStack() as stack:
        config = with_pooled_teachers(stack, with_shared_engine(stack, config))
        engines = evaluation_engines(config)
        teachers = {t.source: evaluate_domain(config.store, t.checkpoint, t, eval_settings, engines)
                    for t in config.teachers}
        before = {t.source: evaluate_domain(config.store, config.init_checkpoint, t, eval_settings, engines)
                  for t in config.teachers}
        trained = train_distill(config)
        after = {t.source: evaluate_domain(config.store, trained.checkpoint, t, eval_settings, engines)
                 for t in config.teachers}
    # A domain without its headline metric (SFT data that no evaluator scores) has no retention to report.
    judged_by = {source: metric for source in teachers if (metric := headline(source, teachers[source])) is not None}
    retention = {source: after[source][metric] / teachers[source][metric] if teachers[source][metric] else float("nan")
                 for source, metric in judged_by.items()}
    publish_stage("distill", config, trained, by_teacher(before), by_teacher(after))
    publish_retention_table({source: (metric, teachers[source][metric], before[source][metric], after[source][metric])
                             for source, metric in judged_by.items()})
    return StageResult(trained, by_teacher(before), by_teacher(after), teacher_scores=by_teacher(teachers),
                       retention=retention)
