"""The distillation flow: each teacher's domain scored for the teacher and for the student before and
after, the training job between, and what the student keeps of each teacher."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from prefect import flow, task

from flows.cards import publish_retention_table, publish_stage
from flows.eval_log import logged
from flows.job import train_stage, with_flow_provenance, with_shared_engine
from flows.stage_checks import validate_stage_inputs
from infra.store import open_store
from stages.distill.config import DistillConfig, TeacherSpec
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.general import evaluate_general
from stages.evaluation.sampled import evaluate_sampled
from stages.evaluation.settings import AgenticEvalSettings, GeneralEvalSettings, SampledEvalSettings
from stages.grpo.config import RewardSpec, default_general_rewards

# The score a teacher's domain is judged by: what its own stage raised.
HEADLINE = {"reasoning_rl": "accuracy_sampled", "agentic_rl": "tool_success", "general_rl": "rule_compliance"}


def headline(source: str, metrics: dict[str, float]) -> str:
    """The metric a teacher's domain is judged by: the overall one where there is one (agentic: tool_success,
    not calc/tool_success), else the one under a prefix (reasoning: its verifier's arith/accuracy_sampled)."""
    wanted = HEADLINE[source]
    return wanted if wanted in metrics else next(name for name in sorted(metrics) if name.endswith("/" + wanted))


@dataclass(frozen=True)
class DistillEvalSettings:
    """How each teacher's domain is evaluated: the settings its own stage used, so a teacher's score is
    the committed evaluation of that stage, read back, and the student is measured alike."""

    sampled: SampledEvalSettings = field(default_factory=SampledEvalSettings)
    agentic: AgenticEvalSettings = field(default_factory=AgenticEvalSettings)
    agentic_tasks: tuple[str, ...] = ("calc", "search")
    general: GeneralEvalSettings = field(default_factory=GeneralEvalSettings)
    general_rewards: list[RewardSpec] = field(default_factory=default_general_rewards)


@task
def train_distill(config: DistillConfig) -> dict:
    return train_stage(config)


@task
def evaluate_domain(store_root: str | None, checkpoint: str, teacher: TeacherSpec, settings: DistillEvalSettings,
                    engine_url: str | None) -> dict[str, float]:
    """`checkpoint` on the held-out split of `teacher`'s domain, as the teacher's stage evaluates it."""
    return logged(checkpoint, domain_metrics(store_root, checkpoint, teacher, settings, engine_url))


def domain_metrics(store_root: str | None, checkpoint: str, teacher: TeacherSpec, settings: DistillEvalSettings,
                   engine_url: str | None) -> dict[str, float]:
    store = open_store(store_root)
    if teacher.source == "reasoning_rl":
        return evaluate_sampled(store, checkpoint, teacher.datasets[0], settings.sampled, engine_url)
    if teacher.source == "agentic_rl":
        return evaluate_agentic(store, checkpoint, teacher.datasets, list(settings.agentic_tasks), settings.agentic,
                                engine_url)
    return evaluate_general(store, checkpoint, teacher.datasets, settings.general_rewards, settings.general, engine_url)


def by_teacher(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{source}/{name}": value for source, named in metrics.items() for name, value in named.items()}


@flow(name="distill", log_prints=True)
def distill(config: DistillConfig, eval_settings: DistillEvalSettings | None = None) -> dict:
    """On-policy distillation of every teacher into the student; per teacher domain: the teacher's score,
    the student's before and after, and the share of the teacher's score the student keeps."""
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "distill")
    eval_settings = eval_settings or DistillEvalSettings()
    with ExitStack() as stack:
        config = with_shared_engine(stack, config)
        teachers = {t.source: evaluate_domain(config.store, t.checkpoint, t, eval_settings, config.engine_url)
                    for t in config.teachers}
        before = {t.source: evaluate_domain(config.store, config.init_checkpoint, t, eval_settings, config.engine_url)
                  for t in config.teachers}
        trained = train_distill(config)
        after = {t.source: evaluate_domain(config.store, trained["checkpoint"], t, eval_settings, config.engine_url)
                 for t in config.teachers}
    judged_by = {source: headline(source, teachers[source]) for source in teachers}
    retention = {source: after[source][judged_by[source]] / teachers[source][judged_by[source]]
                 if teachers[source][judged_by[source]] else float("nan") for source in teachers}
    publish_stage("distill", config, trained, by_teacher(before), by_teacher(after))
    publish_retention_table({source: (judged_by[source], teachers[source][judged_by[source]],
                                      before[source][judged_by[source]], after[source][judged_by[source]])
                             for source in teachers})
    return {"checkpoint": trained["checkpoint"], "history": trained["history"], "train_s": trained["train_s"],
            "metrics_before": by_teacher(before), "metrics_after": by_teacher(after),
            "teacher_scores": by_teacher(teachers), "retention": retention}
