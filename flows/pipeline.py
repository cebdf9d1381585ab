"""The pipeline flow: prepare → SFT → reasoning RL → agentic RL → general RL (later: distillation).

Stages are chained by checkpoint URI. Each stage's artifacts are named by the digest of its config
and inputs, so a re-run with nothing changed finds them committed and does no work.
"""

from __future__ import annotations

import tempfile
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
from flows.general_rl import general_rl
from flows.train_orm import train_orm
from flows.reasoning_rl import reasoning_rl
from flows.sft import evaluate, sft
from infra.store import open_store
from stages.prepare import prepare, publish_preferences, publish_prompts
from stages.agentic_rl_config import AgenticRlConfig
from stages.general_rl_config import GeneralRlConfig, mix_with_orm
from stages.orm_config import TrainOrmConfig
from stages.reasoning_rl_config import ReasoningRlConfig
from stages.sft_config import SftConfig


@task
def prepare_data(params: PipelineParams) -> dict:
    preset = get_preset(params.preset)
    store = open_store(params.store)
    prepared = prepare(store, suites=list(preset.sizes), sizes=preset.sizes, preset=preset.model,
                       seed=params.seed, triggered_by="posttrain pipeline")
    with tempfile.TemporaryDirectory(prefix="posttrain-prompts-") as workdir:
        prompts = {suite: publish_prompts(store, suite, preset.sizes[suite], params.seed, Path(workdir),
                                          "posttrain pipeline")[0].uri for suite in preset.general_suites}
        preferences = {suite: publish_preferences(store, suite, preset.sizes[suite], params.seed, Path(workdir),
                                                  "posttrain pipeline")[0].uri
                       for suite in (preset.preference_suites if preset.orm is not None else ())}
    return {"datasets": {suite: artifact.uri for suite, artifact in prepared.datasets.items()},
            "prompts": prompts, "preferences": preferences, "init_checkpoint": prepared.init_checkpoint.uri}


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


def orm_config(params: PipelineParams, prepared: dict, trunk: str) -> TrainOrmConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.orm, store=params.store, seed=params.seed, init_checkpoint=trunk,
                  datasets=sorted(prepared["preferences"].values()))
    return TrainOrmConfig(run_id=stage_run_id("orm", fields), **fields)


def general_rl_config(params: PipelineParams, prepared: dict, init_checkpoint: str,
                      orm_checkpoint: str | None = None) -> GeneralRlConfig:
    """With an ORM, the mix scores each general domain with its sigmoid next to the rules."""
    preset = get_preset(params.preset)
    fields = dict(preset.general_rl, store=params.store, seed=params.seed, init_checkpoint=init_checkpoint,
                  datasets=sorted(prepared["prompts"].values()))
    if orm_checkpoint is not None:
        fields["rewards"] = [{"path": "rewards.mix.MixedReward",
                              "params": mix_with_orm(orm_checkpoint, preset.general_suites, params.store)}]
    return GeneralRlConfig(run_id=stage_run_id("general_rl", fields), **fields)


def trained_tokens(history: list[dict]) -> int:
    return sum(record.get("trained_tokens", 0) for record in history)


def stage_record(name: str, result: dict, started: float) -> dict:
    """What the run's summary.json says of one stage."""
    return {"stage": name, "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
            "metrics_after": result["metrics_after"], "wall_s": round(time.monotonic() - started, 1),
            "train_s": result["train_s"], "train_tokens": trained_tokens(result["history"])}


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
    stages = [stage_record("sft", result, stage_started) | {"metrics_after_dense": result["metrics_after_dense"]}]
    histories = {"sft": result["history"]}

    if preset.reasoning_rl is not None:
        stage_started = time.monotonic()
        config = reasoning_rl_config(params, prepared, stages[-1]["checkpoint"])
        result = reasoning_rl(config, arith_dataset=prepared["datasets"]["arith"], nproc=params.nproc,
                              eval_settings=replace(preset.rl_eval, seed=params.seed))
        stages.append(stage_record("reasoning_rl", result, stage_started))
        histories["reasoning_rl"] = result["history"]

    if preset.agentic_rl is not None:
        stage_started = time.monotonic()
        config = agentic_rl_config(params, prepared, stages[-1]["checkpoint"])
        result = agentic_rl(config, nproc=params.nproc, eval_settings=replace(preset.agentic_eval, seed=params.seed))
        stages.append(stage_record("agentic_rl", result, stage_started))
        histories["agentic_rl"] = result["history"]

    orm_checkpoint = None
    if preset.orm is not None:
        # The reward model's trunk is the SFT checkpoint: it has read the replies the ORM will judge.
        stage_started = time.monotonic()
        result = train_orm(orm_config(params, prepared, stages[0]["checkpoint"]), nproc=params.nproc)
        stages.append(stage_record("train_orm", result, stage_started))
        histories["train_orm"] = result["history"]
        orm_checkpoint = result["checkpoint"]

    if preset.general_rl is not None:
        stage_started = time.monotonic()
        init = next(s["checkpoint"] for s in reversed(stages) if s["stage"] != "train_orm")
        config = general_rl_config(params, prepared, init, orm_checkpoint)
        result = general_rl(config, nproc=params.nproc, eval_settings=replace(preset.general_eval, seed=params.seed))
        stages.append(stage_record("general_rl", result, stage_started))
        histories["general_rl"] = result["history"]

    summary = {"run_id": run_id, "preset": params.preset, "seed": params.seed,
               "wall_s": round(time.monotonic() - started, 1), "stages": stages}
    report = write_report(Path(params.reports_dir) / run_id, summary, histories,
                          {"sft": {"after (dense attention)": stages[0]["metrics_after_dense"]}})
    return {**summary, "report": str(report)}
