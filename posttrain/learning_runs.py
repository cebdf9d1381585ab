"""The runs of the learning bench (posttrain/learning_bench.py): a stage's config as the pipeline makes it, one
training job run as the stage's flow runs it, its checkpoint evaluated as the flow evaluates it, and the job's
step records summed up.

Everything that decides a result is the pipeline's own code: `prepare_data` resolves the spec's datasets
(preparing is idempotent: on the demo's store it commits nothing new), `flow_inputs` builds the stage's config
and its evaluation settings from the spec, the input checkpoint and (general RL) the ORM, `validate_stage_inputs`
resolves every reference as the flow does. A run changes only its seed, its arm's overrides, and where its
artifacts go: under the bench's own namespace of the store, never `checkpoints/<stage>/`, so `STAGE:latest`
still names what the pipeline made.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

from flows.job import evaluation_engines, stage_workdir, with_shared_engine
from flows.prepare_data import prepare_data
from flows.spec import PipelineSpec
from flows.stage_checks import validate_stage_inputs
from flows.stage_inputs import PipelineRun, flow_inputs, stage_evals
from flows.stage_table import BY_NAME, STAGES, previous_step
from flows.teacher_domains import headline
from infra.launch import StageFailed, run_stage_job
from infra.references import resolve_checkpoint
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.common.config import StageIO
from stages.common.events import parse_event
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.general import evaluate_general
from stages.evaluation.sampled import evaluate_sampled

# The stages whose flow starts one engine for the evaluation before, the training and the evaluation after
# (flows/reasoning_rl.py, flows/general_rl.py); agentic RL's job starts its own replicas.
SHARED_ENGINE = ("reasoning_rl", "general_rl")


@dataclass(frozen=True)
class StageSetup:
    """What every run of the bench shares: the stage's config and evaluation settings as the pipeline makes
    them (the spec's seed), and the checkpoint it starts from."""

    config: StageIO
    eval_settings: Any
    checkpoint: str


def stage_setup(spec: PipelineSpec, base: Path, stage: str, checkpoint: str | None) -> StageSetup:
    """The pipeline's inputs for `stage`: its datasets resolved from the spec, its input checkpoint (default the
    newest of the step before it), and for a stage another serves (general RL's ORM) that stage's newest
    checkpoint, as a pipeline run that trained both would pass it."""
    prepared = prepare_data.fn(spec, base, triggered_by="bench/learning.py")
    store = open_store(spec.store)
    start = resolve_checkpoint(store, checkpoint or f"{previous_step(stage)}:latest", "--checkpoint")
    outputs = {"init": prepared["init_checkpoint"], previous_step(stage): start}
    for helper in STAGES:
        if helper.serves == stage and getattr(spec.stages, helper.name) is not None:
            outputs[helper.name] = resolve_checkpoint(store, f"{helper.name}:latest", f"{helper.name} (serves {stage})")
    config, arguments = flow_inputs(BY_NAME[stage], PipelineRun(spec, prepared, outputs, stage_evals(spec)))
    return StageSetup(validate_stage_inputs.fn(config, stage), arguments["eval_settings"], start)


def with_overrides(fields: dict, overrides: dict[str, Any]) -> dict:
    """`fields` with each dotted key (`dynamic_sampling.enabled`) set; a key that names no field is refused."""
    fields = {**fields}
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node = fields
        for depth, part in enumerate(parents):
            if not isinstance(node.get(part), dict):
                raise ValueError(f"{key}: {'.'.join(parents[:depth + 1])} is not a section of the stage's config")
            section = {**node[part]}  # copied on the way down: `fields` itself is left as it was
            node[part] = section
            node = section
        if leaf not in node:
            raise ValueError(f"{key}: no such field in the stage's config")
        node[leaf] = value
    return fields


def run_config(setup: StageSetup, overrides: dict[str, Any], seed: int, run_id: str, namespace: str) -> StageIO:
    """The pipeline's config with the arm's overrides, the run's seed (`data_seed`, what the suites were made
    with, stays), a run id of its own and its output under `namespace`."""
    fields = with_overrides(setup.config.model_dump(mode="json"), overrides)
    fields |= {"seed": seed, "run_id": run_id, "output_name": f"{namespace}/{run_id}",
               "provenance": {"triggered_by": "bench/learning.py"}}
    return type(setup.config).model_validate(fields)


def evaluate(config: StageIO, checkpoint: str, settings: Any, engines: EngineSettings) -> tuple[str, float]:
    """The stage's held-out headline metric of `checkpoint` (name, value), as its flow measures it: committed
    once per checkpoint and settings, so the demo's evaluation of the input checkpoint is read back."""
    store = open_store(config.store)
    match config.stage_name:
        case "reasoning_rl":
            metrics = evaluate_sampled(store, checkpoint, config.datasets[0], settings, engines)
        case "agentic_rl":
            metrics = evaluate_agentic(store, checkpoint, config.datasets, sorted(config.tasks), settings, engines)
        case "general_rl":
            metrics = evaluate_general(store, checkpoint, config.datasets, config.rewards, settings, engines)
        case other:
            raise ValueError(f"{other}: not an RL stage")
    name = headline(config.stage_name, metrics)
    return name, metrics[name]


@dataclass(frozen=True)
class Trained:
    metric: str  # the headline metric's name
    before: float  # of the input checkpoint
    after: float  # of the run's checkpoint
    checkpoint: str
    history: list[dict]  # the job's step records, in order
    train_s: float


def train_and_evaluate(setup: StageSetup, config: StageIO, on_step: Callable[[dict], None]) -> Trained:
    """What the stage's flow does: the input checkpoint evaluated, the job, its checkpoint evaluated, on one
    shared engine where the flow starts one; every engine started here is stopped when it returns. The
    evaluation before is committed by the first run (or was, by the demo) and read back by the others."""
    with ExitStack() as stack:
        if config.stage_name in SHARED_ENGINE:
            config = with_shared_engine(stack, config)
        engines = evaluation_engines(config)
        metric, before = evaluate(config, setup.checkpoint, setup.eval_settings, engines)
        started = time.monotonic()
        checkpoint, history = run_job(config, on_step)
        train_s = round(time.monotonic() - started, 1)
        _, after = evaluate(config, checkpoint, setup.eval_settings, engines)
    return Trained(metric, before, after, checkpoint, history, train_s)


def run_job(config: StageIO, on_step: Callable[[dict], None]) -> tuple[str, list[dict]]:
    """The stage's job through its launcher, as flows/job.py runs it: (its checkpoint, its step records)."""
    workdir = stage_workdir(config)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "run.json"
    path.write_text(config.model_dump_json(indent=2))
    history: list[dict] = []
    final: dict = {}
    errors: list[str] = []

    def on_line(line: str) -> None:
        event = parse_event(line)
        if event is None:
            return
        if event["event"] == "step":
            history.append(event)
            on_step(event)
        elif event["event"] == "done":
            final.update(event)
        elif event["event"] == "error":
            errors.append(f"rank {event['rank']}: {event['error']}")

    try:
        run_stage_job(config.launch, config.entry_module, path, on_line)
    except StageFailed as failure:
        raise (failure.because(errors[0]) if errors else failure) from None
    if "checkpoint" not in final:
        raise RuntimeError(f"{config.run_id}: the job finished without reporting its checkpoint")
    return final["checkpoint"], history


@contextmanager
def scratch_workdir() -> Iterator[Path]:
    """Stage jobs' scratch (run.json, rank folders, engines' weight pushes) in a temporary folder, removed at
    the end; POSTTRAIN_WORKDIR names it meanwhile (flows/job.py's stage_workdir reads it)."""
    with tempfile.TemporaryDirectory(prefix="learning-bench-") as tmp, patch.dict(os.environ, {"POSTTRAIN_WORKDIR": tmp}):
        yield Path(tmp)


def sanity(history: list[dict], group_size: int) -> dict[str, float | int | None]:
    """Whether a run trained at all: its steps and those without an update, the mean reward over the drawn
    groups, the mean gradient norm and completion length over the updates (agentic RL: the model's tokens
    per trained episode, every turn), and the groups drawn, with a reward spread and trained on."""
    updates = [record for record in history if record.get("updated", 1) != 0]
    return {
        "steps": len(history), "steps_without_update": len(history) - len(updates),
        "reward_mean": mean_or_none([r["reward_mean"] for r in history if "reward_mean" in r]),
        "grad_norm": mean_or_none([r["grad_norm"] for r in updates if "grad_norm" in r]),
        "completion_tokens": mean_or_none([completion_tokens(r, group_size) for r in updates]),
        **{name: sum(r.get(name, 0) for r in history) for name in ("groups_drawn", "groups_with_signal", "groups_trained")},
    }


def completion_tokens(record: dict, group_size: int) -> float:
    if "response_length" in record:  # GRPO: the mean over the policy's samples
        return record["response_length"]
    return record["trained_tokens"] / (record["groups_trained"] * group_size)


def mean_or_none(values: list[float]) -> float | None:
    """The mean (NaN if any value is: a non-finite step shows), None where there is nothing to average."""
    return statistics.fmean(values) if values else None
