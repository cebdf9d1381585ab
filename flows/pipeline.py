"""The pipeline flow: prepare → SFT → reasoning RL → agentic RL (later: general RL → distillation).

Stages are chained by checkpoint URI. Each stage's artifacts are named by the digest of its config
and inputs, so a re-run with nothing changed finds them committed and does no work.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, task

from data_contracts.lineage import config_digest, source_digest
from flows.params import PipelineParams
from flows.presets import get_preset
from flows.report import write_report
from flows.agentic_rl import agentic_rl
from flows.reasoning_rl import reasoning_rl
from flows.sft import evaluate, sft
from infra.store import open_store
from stages.prepare import prepare
from stages.agentic_rl_config import AgenticRlConfig
from stages.reasoning_rl_config import ReasoningRlConfig
from stages.sft_config import SftConfig


@task
def prepare_data(params: PipelineParams) -> dict:
    preset = get_preset(params.preset)
    prepared = prepare(open_store(params.store), suites=list(preset.sizes), sizes=preset.sizes, preset=preset.model,
                       seed=params.seed, triggered_by="posttrain pipeline")
    return {"datasets": {suite: artifact.uri for suite, artifact in prepared.datasets.items()},
            "init_checkpoint": prepared.init_checkpoint.uri}


def stage_run_id(stage: str, fields: dict, trainer_code: str | None = None) -> str:
    """The digest of what determines a stage's result (config, inputs, trainer code): an unchanged
    re-run resumes or skips, and a changed trainer trains anew. `trainer_code` defaults to the
    digest of the trainers' sources."""
    code = trainer_code or source_digest("stages", "model", "rewards", "rollout")
    determining = {k: v for k, v in fields.items() if k != "store"} | {"code": code}
    return f"{stage}-{config_digest(determining)[:12]}"


def sft_config(params: PipelineParams, prepared: dict, trainer_code: str | None = None) -> SftConfig:
    preset = get_preset(params.preset)
    datasets = sorted(prepared["datasets"][suite] for suite in preset.sft_suites)
    fields = dict(preset.sft, store=params.store, seed=params.seed, init_checkpoint=prepared["init_checkpoint"],
                  datasets=datasets)
    return SftConfig(run_id=stage_run_id("sft", fields, trainer_code), **fields)


def reasoning_rl_config(params: PipelineParams, prepared: dict, sft_checkpoint: str) -> ReasoningRlConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.reasoning_rl, store=params.store, seed=params.seed, init_checkpoint=sft_checkpoint,
                  datasets=[prepared["datasets"]["arith"]])
    return ReasoningRlConfig(run_id=stage_run_id("reasoning_rl", fields), **fields)


def agentic_rl_config(params: PipelineParams, prepared: dict, init_checkpoint: str) -> AgenticRlConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.agentic_rl, store=params.store, seed=params.seed, data_seed=params.seed,
                  init_checkpoint=init_checkpoint, datasets=sorted([prepared["datasets"]["calc"], prepared["datasets"]["search"]]))
    return AgenticRlConfig(run_id=stage_run_id("agentic_rl", fields), **fields)


def trained_tokens(history: list[dict]) -> int:
    return sum(record.get("trained_tokens", 0) for record in history)


@flow(name="pipeline", log_prints=True)
def pipeline(params: PipelineParams) -> dict:
    started = time.monotonic()
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{params.preset}-s{params.seed}"
    preset = get_preset(params.preset)
    prepared = prepare_data(params)
    eval_settings = replace(preset.eval, seed=params.seed)
    # The initial checkpoint is stage 0's output and is evaluated with it; the SFT flow's "before"
    # evaluation then reads this committed eval back, so SFT's time is its training and its own eval.
    evaluate(params.store, prepared["init_checkpoint"], prepared["datasets"], eval_settings, ("sparse",))

    stage_started = time.monotonic()
    config = sft_config(params, prepared)
    result = sft(config, datasets_by_suite=prepared["datasets"], nproc=params.nproc, eval_settings=eval_settings)
    stages = [{
        "stage": "sft", "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
        "metrics_after": result["metrics_after"], "metrics_after_dense": result["metrics_after_dense"],
        "wall_s": round(time.monotonic() - stage_started, 1), "train_s": result["train_s"],
        "train_tokens": trained_tokens(result["history"]),
    }]
    histories = {"sft": result["history"]}

    if preset.reasoning_rl is not None:
        stage_started = time.monotonic()
        config = reasoning_rl_config(params, prepared, result["checkpoint"])
        result = reasoning_rl(config, arith_dataset=prepared["datasets"]["arith"], nproc=params.nproc,
                              eval_settings=replace(preset.rl_eval, seed=params.seed))
        stages.append({
            "stage": "reasoning_rl", "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
            "metrics_after": result["metrics_after"], "wall_s": round(time.monotonic() - stage_started, 1),
            "train_s": result["train_s"], "train_tokens": trained_tokens(result["history"]),
        })
        histories["reasoning_rl"] = result["history"]

    if preset.agentic_rl is not None:
        stage_started = time.monotonic()
        config = agentic_rl_config(params, prepared, stages[-1]["checkpoint"])
        result = agentic_rl(config, nproc=params.nproc, eval_settings=replace(preset.agentic_eval, seed=params.seed))
        stages.append({
            "stage": "agentic_rl", "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
            "metrics_after": result["metrics_after"], "wall_s": round(time.monotonic() - stage_started, 1),
            "train_s": result["train_s"], "train_tokens": trained_tokens(result["history"]),
        })
        histories["agentic_rl"] = result["history"]

    summary = {"run_id": run_id, "preset": params.preset, "seed": params.seed,
               "wall_s": round(time.monotonic() - started, 1), "stages": stages}
    report = write_report(Path(params.reports_dir) / run_id, summary, histories,
                          {"sft": {"after (dense attention)": stages[0]["metrics_after_dense"]}})
    return {**summary, "report": str(report)}
