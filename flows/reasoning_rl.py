"""The reasoning RL flow: validate inputs, evaluate the input checkpoint, train, evaluate, publish."""

from __future__ import annotations

from contextlib import ExitStack

from prefect import flow, task

from flows.cards import publish_stage
from flows.eval_log import logged
from flows.job import evaluation_engines, named_by_its_run_id, train_stage, with_flow_provenance, with_shared_engine
from flows.results import StageResult, Trained
from flows.stage_checks import validate_stage_inputs
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.evaluation.sampled import evaluate_sampled
from stages.evaluation.settings import SampledEvalSettings, with_run_seed
from stages.grpo.config import ReasoningRlConfig


@task
def train_reasoning_rl(config: ReasoningRlConfig) -> Trained:
    return train_stage(config)


@task
def evaluate_with_engine(store_root: str | None, checkpoint: str, dataset: str,
                         settings: SampledEvalSettings, engines: EngineSettings) -> dict[str, float]:
    return logged(checkpoint, evaluate_sampled(open_store(store_root), checkpoint, dataset, settings, engines))


@flow(name="reasoning_rl", log_prints=True, on_failure=[named_by_its_run_id])
def reasoning_rl(config: ReasoningRlConfig, eval_dataset: str | None = None,
                 eval_settings: SampledEvalSettings | None = None) -> StageResult:
    """GRPO + IcePop from `config.init_checkpoint`; held-out accuracy (greedy and sampled) before and after,
    on the test split of `eval_dataset` (default: the first of the config's datasets).

    Args:
        config: the reasoning RL run: init checkpoint, prompt datasets, reward modules, sampling, objective, compute.
        eval_dataset: the dataset whose test split is evaluated before and after (a name, NAME:latest or a URI);
            empty: the first of the config's datasets.
        eval_settings: how it is evaluated: prompts, samples per prompt, tokens per answer, seed.
    """
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "reasoning_rl")
    eval_settings = with_run_seed(eval_settings or SampledEvalSettings(), config.seed)
    with ExitStack() as stack:
        config = with_shared_engine(stack, config)
        eval_dataset = eval_dataset or config.datasets[0]
        before = evaluate_with_engine(config.store, config.init_checkpoint, eval_dataset, eval_settings,
                                      evaluation_engines(config))
        trained = train_reasoning_rl(config)
        after = evaluate_with_engine(config.store, trained.checkpoint, eval_dataset, eval_settings,
                                      evaluation_engines(config))
    publish_stage("reasoning_rl", config, trained, before, after)
    return StageResult(trained, before, after)
