"""The SFT flow: validate inputs, dispatch the DeepSpeed job, evaluate, publish what the UI shows."""

from __future__ import annotations

from prefect import flow, task

from flows.cards import publish_stage
from flows.engine_pool import leased_engines
from flows.eval_log import logged
from flows.job import named_by_its_run_id, train_stage, with_flow_provenance
from flows.results import StageResult, Trained
from flows.stage_checks import validate_stage_inputs
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.evaluation.committed import evaluate_checkpoint
from stages.evaluation.settings import EvalSettings
from stages.evaluation.tool_tasks import evaluate_task_episodes, task_datasets
from stages.sft.config import SftConfig


@task
def train_sft(config: SftConfig) -> Trained:
    return train_stage(config)


@task
def evaluate(store_root: str | None, checkpoint: str, datasets: dict[str, str], settings: EvalSettings,
             attention: tuple[str, ...]) -> dict:
    store = open_store(store_root)
    results = evaluate_checkpoint(store, checkpoint, datasets, settings, attention)
    if task_datasets(store, datasets) and "sparse" in results:
        # The code tasks' episodes, on an engine of the pipeline's pool (else one started for them): it serves the
        # model as it is served, with sparse attention.
        with leased_engines(checkpoint, exclusive=False) as engines:
            results["sparse"] |= evaluate_task_episodes(store, checkpoint, datasets, settings,
                                                        engines or EngineSettings())
    return logged(checkpoint, results)


@flow(name="sft", log_prints=True, on_failure=[named_by_its_run_id])
def sft(config: SftConfig, datasets_by_suite: dict[str, str] | None = None,
        eval_settings: EvalSettings | None = None) -> StageResult:
    """Train, then evaluate before/after (sparse and dense attention) on the held-out splits.

    Args:
        config: the SFT run: init checkpoint, datasets, schedule, optimizer, compute and where it runs.
        datasets_by_suite: the held-out evaluation's datasets by suite (arith, search, calc, ...; swe and terminal as
            their task rows, prompt@1, played as agent episodes on an engine): a name, NAME:latest or a URI each;
            empty: no suite is evaluated.
        eval_settings: how the checkpoints before and after are evaluated (samples per suite, tokens per answer).
    """
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "sft")
    eval_settings = eval_settings or EvalSettings()
    suites = datasets_by_suite or {}
    before = evaluate(config.store, config.init_checkpoint, suites, eval_settings, ("sparse",))
    trained = train_sft(config)
    after = evaluate(config.store, trained.checkpoint, suites, eval_settings, ("sparse", "dense"))
    publish_stage("sft", config, trained, before["sparse"], after["sparse"])
    return StageResult(trained, before["sparse"], after["sparse"], metrics_after_dense=after["dense"])
