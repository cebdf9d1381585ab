"""How distillation measures a teacher's domain: as the teacher's own stage evaluates it (its evaluation in
flows/stage_table.py), so a teacher's score is the committed evaluation of that stage read back when the settings
match, and the student is measured alike before and after."""

from __future__ import annotations

from dataclasses import field, make_dataclass, replace
from typing import Annotated

from pydantic import Field

from data_contracts.lineage import Lineage
from flows.stage_table import BY_NAME, TEACHERS
from infra.store import ArtifactStore
from rollout.engine_settings import EngineSettings
from stages.distill.config import TeacherSpec
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.committed import evaluate_checkpoint
from stages.evaluation.general import evaluate_general
from stages.evaluation.sampled import evaluate_sampled
from stages.evaluation.settings import (
    AgenticEvalSettings,
    EvalSettings,
    GeneralEvalSettings,
    SampledEvalSettings,
    with_run_seed,
)
from stages.grpo.config import RewardSpec, default_general_rewards

# The score a domain is judged by, for each kind of evaluation: what a stage evaluated so set out to raise
# (SFT: replies in the model's format, reasoning closed and a stop token).
HEADLINE = {EvalSettings: "format_validity", SampledEvalSettings: "accuracy_sampled",
            AgenticEvalSettings: "tool_success", GeneralEvalSettings: "rule_compliance"}

# One field per stage that teaches, named after it: the settings of its stage's evaluation (the pipeline
# passes the spec's), and what the agentic and general domains are measured with besides.
DistillEvalSettings = make_dataclass("DistillEvalSettings", [
    *((name, Annotated[BY_NAME[name].evaluation, Field(description=f"how {name}'s domain is evaluated")],
       field(default_factory=BY_NAME[name].evaluation)) for name in TEACHERS),
    ("agentic_tasks", Annotated[tuple[str, ...], Field(description="the tasks the agentic domain is measured on")],
     field(default=("calc", "search"))),
    ("general_rewards", Annotated[list[RewardSpec], Field(description="the reward the general domain is scored with")],
     field(default_factory=default_general_rewards)),
], frozen=True, namespace={"__module__": __name__,
                            "__doc__": "How each teacher's domain is evaluated: with the settings its own stage used."})


def with_run_seeds(settings: DistillEvalSettings, seed: int, data_seed: int) -> DistillEvalSettings:
    """Each domain's settings seeded as its own stage seeds them (the agentic domain by the data's seed) where they
    name no seed."""
    def seeded(domain):
        return with_run_seed(domain, data_seed if isinstance(domain, AgenticEvalSettings) else seed)
    return replace(settings, **{name: seeded(getattr(settings, name)) for name in TEACHERS})


def headline(source: str, metrics: dict[str, float]) -> str | None:
    """The metric a teacher's domain is judged by: the overall one where there is one (agentic: tool_success,
    not calc/tool_success), else the one under a prefix (reasoning: its verifier's arith/accuracy_sampled);
    None where the domain has no such metric (SFT data no evaluator scores)."""
    wanted = HEADLINE[BY_NAME[source].evaluation]
    return wanted if wanted in metrics else next((name for name in sorted(metrics) if name.endswith("/" + wanted)), None)


def domain_metrics(store: ArtifactStore, checkpoint: str, teacher: TeacherSpec, settings: DistillEvalSettings,
                   engines: EngineSettings) -> dict[str, float]:
    """`checkpoint` on the held-out split of `teacher`'s datasets, as the teacher's stage evaluates it."""
    match getattr(settings, teacher.source):
        case EvalSettings() as chat:
            named = named_by_lineage(store, teacher.datasets)
            return evaluate_checkpoint(store, checkpoint, named, chat, ("sparse",))["sparse"]
        case SampledEvalSettings() as sampled:
            return evaluate_sampled(store, checkpoint, teacher.datasets[0], sampled, engines)
        case AgenticEvalSettings() as agentic:
            return evaluate_agentic(store, checkpoint, teacher.datasets, list(settings.agentic_tasks), agentic, engines)
        case GeneralEvalSettings() as general:
            return evaluate_general(store, checkpoint, teacher.datasets, settings.general_rewards, general, engines)
        case unknown:
            raise TypeError(f"teacher {teacher.source}: no measure of a domain evaluated with {type(unknown).__name__}")


def named_by_lineage(store: ArtifactStore, uris: list[str]) -> dict[str, str]:
    """{name: uri}, each dataset under the name it was published as (an embedded suite's, an import's): the
    name is what picks its evaluator (stages/evaluation/committed.py)."""
    return {Lineage.model_validate(store.open(uri).lineage()).name: uri for uri in uris}


def check_teacher_sources(teachers: list[TeacherSpec]) -> None:
    """Each teacher's domain is measured as its stage evaluates it, so a teacher names a stage that teaches."""
    for index, teacher in enumerate(teachers):
        if teacher.source not in TEACHERS:
            raise ValueError(f"teachers[{index}].source: {teacher.source!r} is not a stage that teaches; "
                             f"one of {', '.join(TEACHERS)}")
