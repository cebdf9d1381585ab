"""The pipeline flow: prepare → SFT → reasoning RL → agentic RL → general RL (its ORM first) → distillation.

Stages are chained by checkpoint URI. Each stage's artifacts are named by the digest of its config,
inputs and code, so a re-run with nothing changed finds them committed and does no work, and a re-run
after a failure resumes the failed stage from its last committed step. `from_stage` with `init` starts
at any stage from any committed checkpoint; what later stages need from earlier ones (the ORM's SFT
trunk, distillation's teachers) is read from that checkpoint's lineage.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args
from urllib.parse import unquote, urlsplit

from prefect import flow, task

from data_contracts import CHAT_V1, PREFERENCE_V1, PROMPT_V1
from data_contracts.lineage import Lineage, config_digest, source_digest
from flows.agentic_rl import agentic_rl
from flows.cards import PipelineProgress, publish_pipeline_summary
from flows.distill import DistillEvalSettings, distill
from flows.general_rl import general_rl
from flows.params import PipelineParams, StageName
from flows.reasoning_rl import reasoning_rl
from flows.report import commit_report, write_report
from flows.sft import evaluate, sft
from flows.spec import ImportSpec, PipelineSpec, SpecError, recipe_fields
from flows.stage_ancestry import stage_outputs
from flows.train_orm import train_orm
from infra.references import resolve_checkpoint, resolve_dataset
from infra.store import open_store
from model.checks import DSA_ARCHITECTURE, ModelCheckError
from stages.agentic.config import AgenticRecipe, AgenticRlConfig
from stages.distill.config import DistillConfig, TeacherSpec
from stages.evaluation.settings import AgenticEvalSettings, EvalSettings, GeneralEvalSettings, SampledEvalSettings
from stages.grpo.config import GeneralRlConfig, ReasoningRlConfig, RewardSpec, mix_with_orm
from stages.import_data import ImportFailed, import_dataset
from stages.orm.config import TrainOrmConfig
from stages.prepare import import_checkpoint, prepare, publish_preferences, publish_prompts, publish_suite
from stages.sft.config import SftConfig


@task
def prepare_data(spec: PipelineSpec, base: Path, triggered_by: str = "posttrain pipeline") -> dict:
    """Publish the spec's embedded suites, import its local files, make or find the initial checkpoint,
    and resolve every stage's datasets to committed URIs: {"stages": {stage: [uri]}, "evaluated": {name:
    uri} (the chat data SFT is evaluated on), "init_checkpoint": uri}. A reference that names nothing
    committed fails here, naming its field, before any stage starts."""
    store = open_store(spec.store)
    with tempfile.TemporaryDirectory(prefix="posttrain-prepare-") as workdir:
        imported = {name: import_spec(store, name, entry, base, spec.seed, triggered_by)
                    for name, entry in spec.data.imports.items()}
        suites = dict(spec.data.suites)
        if spec.model.preset is not None:
            corpus = tuple(store.open(imported[name]) for name, entry in spec.data.imports.items() if entry.kind == "chat")
            prepared = prepare(store, suites=list(suites), sizes=suites, preset=spec.model.preset, seed=spec.seed,
                               triggered_by=triggered_by, corpus=corpus)
            chat = {suite: artifact.uri for suite, artifact in prepared.datasets.items()}
            init = prepared.init_checkpoint.uri
        else:
            chat = {suite: publish_suite(store, suite, sizes, spec.seed, Path(workdir), triggered_by)[0].uri
                    for suite, sizes in suites.items()}
            init = (import_model(store, spec, base, triggered_by) if spec.model.path is not None
                    else resolve_checkpoint(store, spec.model.checkpoint, "model.checkpoint"))
        # An embedded suite stands for the data of the contract the stage reads.
        publishers = {CHAT_V1.id: lambda suite: chat[suite],
                      PROMPT_V1.id: lambda suite: publish_prompts(store, suite, suites[suite], spec.seed, Path(workdir),
                                                                  triggered_by)[0].uri,
                      PREFERENCE_V1.id: lambda suite: publish_preferences(store, suite, suites[suite], spec.seed,
                                                                          Path(workdir), triggered_by)[0].uri}

        def resolve(stage: str, index: int, reference: str) -> str:
            if reference in suites:
                return publishers[STAGE_CONTRACTS[stage].id](reference)
            if reference in imported:
                return imported[reference]
            return resolve_dataset(store, reference, f"stages.{stage}.datasets[{index}]")

        named = {stage: {ref: resolve(stage, i, ref) for i, ref in enumerate(section.datasets)}
                 for stage, section in spec.stages if section is not None and hasattr(section, "datasets")}
    return {"stages": {stage: sorted(uris.values()) for stage, uris in named.items()},
            "evaluated": chat | named.get("sft", {}), "init_checkpoint": init}


def import_model(store, spec: PipelineSpec, base: Path, triggered_by: str) -> str:
    path = base / spec.model.path
    try:
        return import_checkpoint(store, path, spec.seed, triggered_by).uri
    except ModelCheckError as error:
        raise SpecError(f"model.path: {error}") from None


def import_spec(store, name: str, entry: ImportSpec, base: Path, seed: int, triggered_by: str) -> str:
    path = base / entry.path
    try:
        imported = import_dataset(store, path, entry.kind, name=name, test_fraction=entry.test_fraction,
                                  skip_bad_rows=entry.skip_bad_rows, seed=seed, triggered_by=triggered_by)
    except ImportFailed as error:
        raise SpecError(f"data.imports.{name}: {error}") from None
    if imported.rejected:
        print(f"data.imports.{name}: {imported.rejected} bad rows skipped, listed in {imported.rejects_file}")
    return imported.dataset.uri


# The contract each stage's datasets are read as (an embedded suite is published in it).
STAGE_CONTRACTS = {"sft": CHAT_V1, "reasoning_rl": CHAT_V1, "agentic_rl": CHAT_V1, "orm": PREFERENCE_V1,
                   "general_rl": PROMPT_V1}


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
    return dict(recipe_fields(section), store=spec.store, seed=spec.seed, init_checkpoint=init_checkpoint,
                launch=launch, **datasets, **more)


def sft_config(spec: PipelineSpec, prepared: dict, trainer_code: str | None = None) -> SftConfig:
    fields = stage_fields(spec, "sft", prepared, prepared["init_checkpoint"])
    return SftConfig(run_id=stage_run_id("sft", fields, trainer_code), **fields)


def reasoning_rl_config(spec: PipelineSpec, prepared: dict, init_checkpoint: str) -> ReasoningRlConfig:
    fields = stage_fields(spec, "reasoning_rl", prepared, init_checkpoint)
    return ReasoningRlConfig(run_id=stage_run_id("reasoning_rl", fields), **fields)


def agentic_rl_config(spec: PipelineSpec, prepared: dict, init_checkpoint: str) -> AgenticRlConfig:
    fields = stage_fields(spec, "agentic_rl", prepared, init_checkpoint, data_seed=spec.seed)
    return AgenticRlConfig(run_id=stage_run_id("agentic_rl", fields), **fields)


def orm_config(spec: PipelineSpec, prepared: dict, trunk: str) -> TrainOrmConfig:
    fields = stage_fields(spec, "orm", prepared, trunk)
    return TrainOrmConfig(run_id=stage_run_id("orm", fields), **fields)


def general_rl_config(spec: PipelineSpec, prepared: dict, init_checkpoint: str,
                      orm_checkpoint: str | None = None) -> GeneralRlConfig:
    """With an ORM, the mix scores each general domain (the stage's datasets by name) with its sigmoid next to the rules."""
    fields = stage_fields(spec, "general_rl", prepared, init_checkpoint)
    if orm_checkpoint is not None:
        fields["rewards"] = [{"path": "rewards.mix.MixedReward",
                              "params": mix_with_orm(orm_checkpoint, tuple(spec.stages.general_rl.datasets), spec.store)}]
    return GeneralRlConfig(run_id=stage_run_id("general_rl", fields), **fields)


def distill_config(spec: PipelineSpec, student: str, teachers: list[TeacherSpec]) -> DistillConfig:
    fields = stage_fields(spec, "distill", {"stages": {}}, student, data_seed=spec.seed,
                          teachers=[teacher.model_dump() for teacher in teachers])
    return DistillConfig(run_id=stage_run_id("distill", fields), **fields)


def trained_tokens(history: list[dict]) -> int:
    return sum(record.get("trained_tokens", 0) for record in history)


def recorded_rollouts(history: list[dict]) -> dict | None:
    """What the stage put on record of the samples it trained on, and the time its job spent writing them
    (None: a stage that records none, or a history read back from a checkpoint, which keeps no timings)."""
    steps = [record for record in history if "recorded_samples" in record]
    if not steps:
        return None
    return {"samples": sum(r["recorded_samples"] for r in steps), "bytes": sum(r["recorded_bytes"] for r in steps),
            "record_s": round(sum(r["record_s"] for r in steps), 2) if all("record_s" in r for r in steps) else None}


def stage_record(name: str, result: dict, started: float) -> dict:
    """What the run's summary.json says of one stage."""
    return {"stage": name, "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
            "metrics_after": result["metrics_after"], "wall_s": round(time.monotonic() - started, 1),
            "train_s": result["train_s"], "train_tokens": trained_tokens(result["history"]),
            **({"rollouts": rollouts} if (rollouts := recorded_rollouts(result["history"])) else {})}


STAGES = get_args(StageName)


def starting_outputs(params: PipelineParams, spec: PipelineSpec, prepared: dict) -> dict[str, str]:
    """{stage: checkpoint} the run starts with: the initial model, and with `from_stage`, `init` as the
    output of the stage before it plus whatever earlier stages its lineage names."""
    outputs = {"init": prepared["init_checkpoint"]}
    if params.init is None:  # PipelineParams allows that only for a run from SFT
        return outputs
    store = open_store(spec.store)
    uri = resolve_checkpoint(store, params.init, "init")
    outputs |= stage_outputs(store, uri)
    outputs[(("init",) + STAGES)[STAGES.index(params.from_stage)]] = uri
    return outputs


def latest(outputs: dict[str, str], before: str) -> str:
    """The checkpoint of the last stage before `before` that has one (the initial model at least)."""
    order = ("init",) + STAGES
    return next(outputs[s] for s in reversed(order[: order.index(before)]) if s in outputs)


@flow(name="pipeline", log_prints=True)
def pipeline(params: PipelineParams) -> dict:
    started = time.monotonic()
    name, spec, base = params.load_spec()
    # The random tail keeps two runs started in one second (two pipelines on one store) apart.
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{name}-s{spec.seed}-{secrets.token_hex(2)}"
    prepared = prepare_data(spec, base)
    outputs = starting_outputs(params, spec, prepared)
    first, last = STAGES.index(params.from_stage or "sft"), STAGES.index(params.to_stage or "distill")
    runs = {stage: first <= STAGES.index(stage) <= last and getattr(spec.stages, stage) is not None for stage in STAGES}
    stages, histories, extra_columns = [], {}, {}
    evals = stage_evals(spec)
    notes = model_notes(open_store(spec.store), outputs["init"])
    for note in notes:
        print(note)

    progress = PipelineProgress([stage for stage in ("sft", "reasoning_rl", "agentic_rl", "train_orm", "general_rl",
                                                     "distill")
                                 if runs.get(stage) or (stage == "train_orm" and runs["general_rl"] and spec.stages.orm is not None)])

    def finished(stage: str, result: dict, stage_started: float) -> None:
        stages.append(stage_record(stage, result, stage_started))
        histories[stage] = result["history"]
        outputs[stage] = result["checkpoint"]
        progress.finished(stage)

    if runs["sft"]:
        eval_settings = replace(evals["sft"], seed=spec.seed)
        # The initial checkpoint is stage 0's output and is evaluated with it; the SFT flow's "before"
        # evaluation then reads this committed eval back, so SFT's time is its training and its own eval.
        evaluate(spec.store, outputs["init"], prepared["evaluated"], eval_settings, ("sparse",))
        stage_started = time.monotonic()
        config = sft_config(spec, prepared | {"init_checkpoint": outputs["init"]})
        result = sft(config, datasets_by_suite=prepared["evaluated"], eval_settings=eval_settings)
        finished("sft", result, stage_started)
        extra_columns["sft"] = {"after (dense attention)": result["metrics_after_dense"]}

    if runs["reasoning_rl"]:
        stage_started = time.monotonic()
        config = reasoning_rl_config(spec, prepared, latest(outputs, "reasoning_rl"))
        result = reasoning_rl(config, eval_settings=replace(evals["reasoning_rl"], seed=spec.seed))
        finished("reasoning_rl", result, stage_started)

    if runs["agentic_rl"]:
        stage_started = time.monotonic()
        config = agentic_rl_config(spec, prepared, latest(outputs, "agentic_rl"))
        result = agentic_rl(config, eval_settings=replace(evals["agentic_rl"], seed=spec.seed))
        finished("agentic_rl", result, stage_started)

    general_rewards = None
    if runs["general_rl"]:
        orm_checkpoint = None
        if spec.stages.orm is not None:
            # The reward model's trunk is the SFT checkpoint: it has read the replies the ORM will judge.
            stage_started = time.monotonic()
            result = train_orm(orm_config(spec, prepared, outputs.get("sft", latest(outputs, "general_rl"))))
            stages.append(stage_record("train_orm", result, stage_started))
            histories["train_orm"] = result["history"]
            progress.finished("train_orm")
            orm_checkpoint = result["checkpoint"]
        stage_started = time.monotonic()
        config = general_rl_config(spec, prepared, latest(outputs, "general_rl"), orm_checkpoint)
        general_rewards = config.rewards
        result = general_rl(config, eval_settings=replace(evals["general_rl"], seed=spec.seed))
        finished("general_rl", result, stage_started)

    if runs["distill"]:
        teachers = distill_teachers(spec, prepared, outputs)
        if general_rewards is None and "general_rl" in outputs:  # started past general RL: its own config says
            recorded = Lineage.model_validate(open_store(spec.store).open(outputs["general_rl"]).lineage())
            general_rewards = [RewardSpec(**reward) for reward in recorded.config["rewards"]]
        stage_started = time.monotonic()
        result = distill(distill_config(spec, latest(outputs, "distill"), teachers),
                         eval_settings=DistillEvalSettings(
                             sampled=replace(evals["reasoning_rl"], seed=spec.seed),
                             agentic=replace(evals["agentic_rl"], seed=spec.seed),
                             agentic_tasks=tuple(sorted(agentic_tasks(spec))),
                             general=replace(evals["general_rl"], seed=spec.seed),
                             **({"general_rewards": general_rewards} if general_rewards is not None else {})))
        finished("distill", result, stage_started)
        stages[-1] |= {"teacher_scores": result["teacher_scores"], "retention": result["retention"]}
        extra_columns["distill"] = {"teacher": result["teacher_scores"]}

    summary = {"run_id": run_id, "preset": name, "seed": spec.seed, "from_stage": params.from_stage,
               "to_stage": params.to_stage, "notes": notes,
               "wall_s": round(time.monotonic() - started, 1), "stages": stages}
    store = open_store(spec.store)
    run_dir = Path(params.reports_dir or reports_folder(store)) / run_id
    report = write_report(run_dir, summary, histories, extra_columns)
    committed = commit_report(store, run_dir, summary)
    publish_pipeline_summary(summary, committed.uri)
    return {**summary, "report": str(report), "report_uri": committed.uri}


def reports_folder(store) -> Path:
    """Where a run's report is written on this machine: beside a local store's artifacts (./artifacts/runs
    for the default store), under the working directory for a remote one."""
    root = store.root_uri
    if root.startswith("file://"):
        return Path(unquote(urlsplit(root).path)) / "runs"
    return Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / "reports"


def model_notes(store, checkpoint: str) -> list[str]:
    """What the report says about the model the run starts from: a model without DSA's indexer trains
    with the DSA steps skipped."""
    architectures = json.loads(store.open(checkpoint).read_bytes("config.json")).get("architectures") or []
    if DSA_ARCHITECTURE in architectures:
        return []
    return [f"The model ({', '.join(architectures) or 'unnamed architecture'}) has no DSA indexer: the DSA steps "
            "(indexer warm-up, sparse attention) were skipped, and its sparse and dense evaluations are the same."]


def stage_evals(spec: PipelineSpec) -> dict:
    """Each stage's evaluation settings; a stage the spec leaves out is measured (as distillation's
    teacher domain) with its defaults."""
    defaults = {"sft": EvalSettings(), "reasoning_rl": SampledEvalSettings(), "agentic_rl": AgenticEvalSettings(),
                "general_rl": GeneralEvalSettings()}
    return {stage: getattr(spec.stages, stage).eval if getattr(spec.stages, stage) is not None else default
            for stage, default in defaults.items()}


def agentic_tasks(spec: PipelineSpec) -> list[str]:
    return list((spec.stages.agentic_rl or AgenticRecipe()).tasks)


def distill_teachers(spec: PipelineSpec, prepared: dict, outputs: dict[str, str]) -> list[TeacherSpec]:
    """The final checkpoint of each RL stage the run has one of, with the datasets of its prompt set; the
    agentic teacher's prompts are played as whole episodes of its stage's tasks."""
    episodes = {"agentic_rl": sorted(agentic_tasks(spec))}
    shares = spec.stages.distill.shares
    return [TeacherSpec(source=source, checkpoint=outputs[source], datasets=prepared["stages"][source],
                        share=shares.get(source, 1), agent_tasks=episodes.get(source, []))
            for source in ("reasoning_rl", "agentic_rl", "general_rl") if source in outputs and source in prepared["stages"]]
