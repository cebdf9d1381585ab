"""The agentic RL flow: validate inputs, evaluate tool-task success, train asynchronously, evaluate, publish."""

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
from stages.agentic.config import AgenticRlConfig
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.settings import AgenticEvalSettings, with_run_seed


@task
def train_agentic_rl(config: AgenticRlConfig) -> Trained:
    return train_stage(config)


@task
def evaluate_tool_tasks(store_root: str | None, checkpoint: str, datasets: list[str], tasks: list[str],
                        settings: AgenticEvalSettings) -> dict[str, float]:
    """On an engine of the pipeline's pool serving `checkpoint` (flows/engine_pool.py), else one started for it."""
    with leased_engines(checkpoint, exclusive=False) as engines:
        return logged(checkpoint, evaluate_agentic(open_store(store_root), checkpoint, datasets, tasks, settings,
                                                   engines or EngineSettings()))


@flow(name="agentic_rl", log_prints=True, on_failure=[named_by_its_run_id])
def agentic_rl(config: AgenticRlConfig, eval_settings: AgenticEvalSettings | None = None) -> StageResult:
    """Fully asynchronous agentic RL from `config.init_checkpoint`; held-out tool-task success before and after.

    The stage starts its engine replicas and task services itself and stops them when it ends.

    Args:
        config: the agentic RL run: init checkpoint, task datasets and tasks, mode, rewards, compute.
        eval_settings: how held-out tool-task success is measured before and after: episodes per task, seed.
    """
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "agentic_rl")
    eval_settings = with_run_seed(eval_settings or AgenticEvalSettings(), config.data_seed)
    tasks = sorted(config.tasks)
    before = evaluate_tool_tasks(config.store, config.init_checkpoint, config.datasets, tasks, eval_settings)
    trained = train_agentic_rl(config)
    after = evaluate_tool_tasks(config.store, trained.checkpoint, config.datasets, tasks, eval_settings)
    publish_stage("agentic_rl", config, trained, before, after)
    return StageResult(trained, before, after)
