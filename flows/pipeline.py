"""The pipeline flow: prepare → SFT → reasoning RL → agentic RL → general RL (its ORM first) → distillation.

Stages are chained by checkpoint URI. Each stage's artifacts are named by the digest of its config,
inputs and code, so a re-run with nothing changed finds them committed and does no work, and a re-run
after a failure resumes the failed stage from its last committed step. `from_stage` with `init` starts
at any stage from any committed checkpoint; what later stages need from earlier ones (the ORM's SFT
trunk, distillation's teachers) is read from that checkpoint's lineage.

The stages and their order are the table of flows/stage_table.py; what each stage's flow is called with is
flows/stage_inputs.py; every flow returns a StageResult, which this flow records alike for every stage.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from prefect import flow

from flows.cards import PipelineProgress, publish_pipeline_summary
from flows.engine_pool import engine_pool, scratch_root
from flows.job import name_flow_run
from flows.params import PipelineParams
from flows.prepare_data import prepare_data
from flows.report import commit_report, write_report
from flows.results import StageResult
from flows.spec import PipelineSpec
from flows.stage_ancestry import stage_outputs
from flows.stage_inputs import PipelineRun, flow_inputs, stage_evals
from flows.stage_table import STEPS, Stage, previous_step
from infra.references import resolve_checkpoint
from infra.store import open_store
from model.checks import DSA_ARCHITECTURE
from rollout.engine_starts import engine_starts, recording_engine_starts, starts_figures


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


def stage_record(name: str, result: StageResult, started: float) -> dict:
    """What the run's summary.json says of one stage."""
    history = result.trained.history
    distilled = {"teacher_scores": result.teacher_scores, "retention": result.retention}
    return {"stage": name, "checkpoint": result.checkpoint, "metrics_before": result.metrics_before,
            "metrics_after": result.metrics_after, "wall_s": round(time.monotonic() - started, 1),
            "train_s": result.trained.train_s, "train_tokens": trained_tokens(history),
            **({"rollouts": rollouts} if (rollouts := recorded_rollouts(history)) else {}),
            **{key: value for key, value in distilled.items() if value is not None}}


def starting_outputs(params: PipelineParams, spec: PipelineSpec, prepared: dict) -> dict[str, str]:
    """{stage: checkpoint} the run starts with: the initial model, and with `from_stage`, `init` as the
    output of the step before it plus whatever earlier stages its lineage names."""
    outputs = {"init": prepared["init_checkpoint"]}
    if params.init is None:  # PipelineParams allows that only for a run from the first step
        return outputs
    store = open_store(spec.store)
    uri = resolve_checkpoint(store, params.init, "init")
    outputs |= stage_outputs(store, uri)
    outputs[previous_step(params.from_stage)] = uri
    return outputs


def planned_stages(params: PipelineParams, spec: PipelineSpec) -> list[Stage]:
    """The spec's stages from `from_stage` to `to_stage`, in order; a stage that serves another runs with it."""
    first, last = STEPS.index(params.from_stage or STEPS[0]), STEPS.index(params.to_stage or STEPS[-1])
    return [stage for stage in spec.included_stages() if first <= STEPS.index(stage.serves or stage.name) <= last]


@flow(name="pipeline", log_prints=True)
def pipeline(params: PipelineParams) -> dict:
    """The whole pipeline from a spec: SFT, reasoning RL, agentic RL, the ORM, general RL and distillation, each
    stage skipped where its output is committed, then the report with every stage's before and after.

    Args:
        params: the spec (a preset, a file, or the spec itself as YAML or JSON), the stages to run and the seed.
    """
    started = time.monotonic()
    name, spec, base = params.load_spec()
    # The random tail keeps two runs started in one second (two pipelines on one store) apart.
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{name}-s{spec.seed}-{secrets.token_hex(2)}"
    name_flow_run(run_id)
    prepared = prepare_data(spec, base)
    run = PipelineRun(spec, prepared, starting_outputs(params, spec, prepared), stage_evals(spec))
    notes = model_notes(open_store(spec.store), run.outputs["init"])
    for note in notes:
        print(note)

    planned = planned_stages(params, spec)
    # The report and the run page name each stage by its flow: the deployment a person would run it as.
    progress = PipelineProgress([stage.load_flow().name for stage in planned])
    stages, histories, extra_columns = [], {}, {}
    store = open_store(spec.store)
    run_dir = Path(params.reports_dir or reports_folder(store)) / run_id
    with recording_engine_starts(run_dir / "engine-starts.jsonl") as ledger, \
            engine_pool(scratch_root() / run_id / "engines", spec.seed) as pool:
        for index, stage in enumerate(planned):
            config, arguments = flow_inputs(stage, run)
            pool.keep_only(*checkpoints_read(config, planned[index + 1:], run))
            stage_started, starts_before = time.monotonic(), len(engine_starts(ledger))
            result = stage.load_flow()(config, **arguments)
            run.outputs[stage.name] = result.checkpoint
            reported = stage.load_flow().name
            stages.append(stage_record(reported, result, stage_started)
                          | starts_figures(engine_starts(ledger)[starts_before:]))
            histories[reported] = result.trained.history
            extra_columns[reported] = result.report_columns()
            progress.finished(reported)

    summary = {"run_id": run_id, "preset": name, "seed": spec.seed, "from_stage": params.from_stage,
               "to_stage": params.to_stage, "notes": notes,
               "wall_s": round(time.monotonic() - started, 1), **starts_figures(engine_starts(ledger)), "stages": stages}
    report = write_report(run_dir, summary, histories, extra_columns)
    committed = commit_report(store, run_dir, summary)
    publish_pipeline_summary(summary, committed.uri)
    return {**summary, "report": str(report), "report_uri": committed.uri}


def checkpoints_read(config, later_stages: list[Stage], run: PipelineRun) -> tuple[set[str], set[str]]:
    """What the run's engine pool keeps engines for (flows/engine_pool.py): the checkpoints the coming stage reads
    (its starting checkpoint, its teachers'), and those a stage after it reads that exist already (the
    teaching stages' outputs, where distillation comes later)."""
    now = {config.init_checkpoint, *(teacher.checkpoint for teacher in getattr(config, "teachers", []))}
    teaching_later = any(stage.learns_from_teachers for stage in later_stages)
    later = {run.outputs[source] for source in run.spec.teacher_stages() if source in run.outputs} \
        if teaching_later else set()
    return now, later


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
