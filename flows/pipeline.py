"""The pipeline flow: prepare → SFT → reasoning RL → agentic RL → general RL (its ORM first) → distillation.

Stages are chained by checkpoint URI. Each stage's artifacts are named by the digest of its config,
inputs and code, so a re-run with nothing changed finds them committed and does no work, and a re-run
after a failure resumes the failed stage from its last committed step. `from_stage` with `init` starts
at any stage from any committed checkpoint; what later stages need from earlier ones (the ORM's SFT
trunk, distillation's teachers) is read from that checkpoint's lineage.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

from prefect import flow, task

from data_contracts.lineage import Lineage, config_digest, source_digest
from flows.agentic_rl import agentic_rl
from flows.distill import DistillEvalSettings, distill
from flows.general_rl import general_rl
from flows.params import PipelineParams, StageName
from flows.presets import get_preset
from flows.reasoning_rl import reasoning_rl
from flows.report import write_report
from flows.sft import evaluate, sft
from flows.stage_ancestry import stage_outputs
from flows.train_orm import train_orm
from infra.store import open_store
from stages.agentic.config import AgenticRecipe, AgenticRlConfig
from stages.distill.config import DistillConfig, TeacherSpec
from stages.grpo.config import GeneralRlConfig, ReasoningRlConfig, RewardSpec, mix_with_orm
from stages.orm.config import TrainOrmConfig
from stages.prepare import prepare, publish_preferences, publish_prompts
from stages.sft.config import SftConfig


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


# The packages whose code decides a stage's result: the trainers, the model, rewards and rollouts, and
# the suites' answer checks and tool implementations the rewards and agent tasks use.
TRAINER_CODE = ("stages", "model", "rewards", "rollout", "suites")


def stage_run_id(stage: str, fields: dict, trainer_code: str | None = None) -> str:
    """The digest of what determines a stage's result (config, inputs, trainer code): an unchanged
    re-run resumes or skips, and a changed trainer trains anew. `trainer_code` defaults to the
    digest of the trainers' sources."""
    code = trainer_code or source_digest(*TRAINER_CODE)
    determining = {k: v for k, v in fields.items() if k != "store"} | {"code": code}
    return f"{stage}-{config_digest(determining)[:12]}"


def sft_config(params: PipelineParams, prepared: dict, trainer_code: str | None = None) -> SftConfig:
    preset = get_preset(params.preset)
    datasets = sorted(prepared["datasets"][suite] for suite in preset.sft_suites)
    fields = dict(preset.sft.model_dump(mode="json"), store=params.store, seed=params.seed, init_checkpoint=prepared["init_checkpoint"],
                  datasets=datasets)
    return SftConfig(run_id=stage_run_id("sft", fields, trainer_code), **fields)


def reasoning_rl_config(params: PipelineParams, prepared: dict, sft_checkpoint: str) -> ReasoningRlConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.reasoning_rl.model_dump(mode="json"), store=params.store, seed=params.seed, init_checkpoint=sft_checkpoint,
                  datasets=[prepared["datasets"]["arith"]])
    return ReasoningRlConfig(run_id=stage_run_id("reasoning_rl", fields), **fields)


def agentic_rl_config(params: PipelineParams, prepared: dict, init_checkpoint: str) -> AgenticRlConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.agentic_rl.model_dump(mode="json"), store=params.store, seed=params.seed, data_seed=params.seed,
                  init_checkpoint=init_checkpoint, datasets=sorted([prepared["datasets"]["calc"], prepared["datasets"]["search"]]))
    return AgenticRlConfig(run_id=stage_run_id("agentic_rl", fields), **fields)


def orm_config(params: PipelineParams, prepared: dict, trunk: str) -> TrainOrmConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.orm.model_dump(mode="json"), store=params.store, seed=params.seed, init_checkpoint=trunk,
                  datasets=sorted(prepared["preferences"].values()))
    return TrainOrmConfig(run_id=stage_run_id("orm", fields), **fields)


def general_rl_config(params: PipelineParams, prepared: dict, init_checkpoint: str,
                      orm_checkpoint: str | None = None) -> GeneralRlConfig:
    """With an ORM, the mix scores each general domain with its sigmoid next to the rules."""
    preset = get_preset(params.preset)
    fields = dict(preset.general_rl.model_dump(mode="json"), store=params.store, seed=params.seed, init_checkpoint=init_checkpoint,
                  datasets=sorted(prepared["prompts"].values()))
    if orm_checkpoint is not None:
        fields["rewards"] = [{"path": "rewards.mix.MixedReward",
                              "params": mix_with_orm(orm_checkpoint, preset.general_suites, params.store)}]
    return GeneralRlConfig(run_id=stage_run_id("general_rl", fields), **fields)


def distill_config(params: PipelineParams, student: str, teachers: list[TeacherSpec]) -> DistillConfig:
    preset = get_preset(params.preset)
    fields = dict(preset.distill.model_dump(mode="json"), store=params.store, seed=params.seed, data_seed=params.seed, init_checkpoint=student,
                  teachers=[teacher.model_dump() for teacher in teachers])
    return DistillConfig(run_id=stage_run_id("distill", fields), **fields)


def trained_tokens(history: list[dict]) -> int:
    return sum(record.get("trained_tokens", 0) for record in history)


def stage_record(name: str, result: dict, started: float) -> dict:
    """What the run's summary.json says of one stage."""
    return {"stage": name, "checkpoint": result["checkpoint"], "metrics_before": result["metrics_before"],
            "metrics_after": result["metrics_after"], "wall_s": round(time.monotonic() - started, 1),
            "train_s": result["train_s"], "train_tokens": trained_tokens(result["history"])}


STAGES = get_args(StageName)


def starting_outputs(params: PipelineParams, prepared: dict) -> dict[str, str]:
    """{stage: checkpoint} the run starts with: the initial model, and with `from_stage`, `init` as the
    output of the stage before it plus whatever earlier stages its lineage names."""
    outputs = {"init": prepared["init_checkpoint"]}
    if params.init is None:  # PipelineParams allows that only for a run from SFT
        return outputs
    store = open_store(params.store)
    uri = store.open(params.init).uri
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
    # The random tail keeps two runs started in one second (two pipelines on one store) apart.
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{params.preset}-s{params.seed}-{secrets.token_hex(2)}"
    preset = get_preset(params.preset)
    prepared = prepare_data(params)
    outputs = starting_outputs(params, prepared)
    first, last = STAGES.index(params.from_stage or "sft"), STAGES.index(params.to_stage or "distill")
    runs = {name: first <= STAGES.index(name) <= last for name in STAGES}
    stages, histories, extra_columns = [], {}, {}

    def finished(name: str, result: dict, stage_started: float) -> None:
        stages.append(stage_record(name, result, stage_started))
        histories[name] = result["history"]
        outputs[name] = result["checkpoint"]

    if runs["sft"]:
        eval_settings = replace(preset.eval, seed=params.seed)
        # The initial checkpoint is stage 0's output and is evaluated with it; the SFT flow's "before"
        # evaluation then reads this committed eval back, so SFT's time is its training and its own eval.
        evaluate(params.store, outputs["init"], prepared["datasets"], eval_settings, ("sparse",))
        stage_started = time.monotonic()
        config = sft_config(params, prepared | {"init_checkpoint": outputs["init"]})
        result = sft(config, datasets_by_suite=prepared["datasets"], nproc=params.nproc, eval_settings=eval_settings)
        finished("sft", result, stage_started)
        extra_columns["sft"] = {"after (dense attention)": result["metrics_after_dense"]}

    if runs["reasoning_rl"] and preset.reasoning_rl is not None:
        stage_started = time.monotonic()
        config = reasoning_rl_config(params, prepared, latest(outputs, "reasoning_rl"))
        result = reasoning_rl(config, arith_dataset=prepared["datasets"]["arith"], nproc=params.nproc,
                              eval_settings=replace(preset.rl_eval, seed=params.seed))
        finished("reasoning_rl", result, stage_started)

    if runs["agentic_rl"] and preset.agentic_rl is not None:
        stage_started = time.monotonic()
        config = agentic_rl_config(params, prepared, latest(outputs, "agentic_rl"))
        result = agentic_rl(config, nproc=params.nproc, eval_settings=replace(preset.agentic_eval, seed=params.seed))
        finished("agentic_rl", result, stage_started)

    general_rewards = None
    if runs["general_rl"] and preset.general_rl is not None:
        orm_checkpoint = None
        if preset.orm is not None:
            # The reward model's trunk is the SFT checkpoint: it has read the replies the ORM will judge.
            stage_started = time.monotonic()
            result = train_orm(orm_config(params, prepared, outputs.get("sft", latest(outputs, "general_rl"))),
                               nproc=params.nproc)
            stages.append(stage_record("train_orm", result, stage_started))
            histories["train_orm"] = result["history"]
            orm_checkpoint = result["checkpoint"]
        stage_started = time.monotonic()
        config = general_rl_config(params, prepared, latest(outputs, "general_rl"), orm_checkpoint)
        general_rewards = config.rewards
        result = general_rl(config, nproc=params.nproc, eval_settings=replace(preset.general_eval, seed=params.seed))
        finished("general_rl", result, stage_started)

    if runs["distill"] and preset.distill is not None:
        teachers = distill_teachers(params, prepared, outputs)
        if general_rewards is None and "general_rl" in outputs:  # started past general RL: its own config says
            recorded = Lineage.model_validate(open_store(params.store).open(outputs["general_rl"]).lineage())
            general_rewards = [RewardSpec(**spec) for spec in recorded.config["rewards"]]
        stage_started = time.monotonic()
        result = distill(distill_config(params, latest(outputs, "distill"), teachers), nproc=params.nproc,
                         eval_settings=DistillEvalSettings(
                             sampled=replace(preset.rl_eval, seed=params.seed),
                             agentic=replace(preset.agentic_eval, seed=params.seed),
                             agentic_tasks=tuple(sorted(agentic_tasks(preset))),
                             general=replace(preset.general_eval, seed=params.seed),
                             **({"general_rewards": general_rewards} if general_rewards is not None else {})))
        finished("distill", result, stage_started)
        stages[-1] |= {"teacher_scores": result["teacher_scores"], "retention": result["retention"]}
        extra_columns["distill"] = {"teacher": result["teacher_scores"]}

    summary = {"run_id": run_id, "preset": params.preset, "seed": params.seed, "from_stage": params.from_stage,
               "to_stage": params.to_stage,
               "wall_s": round(time.monotonic() - started, 1), "stages": stages}
    report = write_report(Path(params.reports_dir) / run_id, summary, histories, extra_columns)
    return {**summary, "report": str(report)}


def agentic_tasks(preset) -> list[str]:
    return list((preset.agentic_rl or AgenticRecipe()).tasks)


def distill_teachers(params: PipelineParams, prepared: dict, outputs: dict[str, str]) -> list[TeacherSpec]:
    """The final checkpoint of each RL stage the run has one of, with the datasets of its prompt set; the
    agentic teacher's prompts are played as whole episodes of its stage's tasks."""
    preset = get_preset(params.preset)
    datasets = prepared["datasets"]
    prompt_sets = {"reasoning_rl": [datasets["arith"]], "agentic_rl": sorted([datasets["calc"], datasets["search"]]),
                   "general_rl": sorted(prepared["prompts"][suite] for suite in preset.general_suites)}
    episodes = {"agentic_rl": sorted(agentic_tasks(preset))}
    return [TeacherSpec(source=source, checkpoint=outputs[source], datasets=prompt_sets[source],
                        share=preset.distill_shares.get(source, 1), agent_tasks=episodes.get(source, []))
            for source in prompt_sets if source in outputs]
