"""The general RL flow: validate inputs, evaluate the input checkpoint, train, evaluate, publish."""

from __future__ import annotations

from contextlib import ExitStack

from prefect import flow, task

from flows.cards import publish_stage
from flows.eval_log import logged
from flows.job import evaluation_engines, named_by_its_run_id, train_stage, with_flow_provenance, with_shared_engine
from flows.results import StageResult, Trained
from flows.stage_checks import validate_stage_inputs
from infra.store import open_store
from stages.evaluation.general import evaluate_general
from stages.evaluation.settings import GeneralEvalSettings, with_run_seed
from stages.grpo.config import GeneralRlConfig


@task
def train_general_rl(config: GeneralRlConfig) -> Trained:
    return train_stage(config)


@task
def evaluate_rules_and_rewards(config: GeneralRlConfig, checkpoint: str, settings: GeneralEvalSettings) -> dict[str, float]:
    return logged(checkpoint, evaluate_general(open_store(config.store), checkpoint, config.datasets, config.rewards,
                                               settings, evaluation_engines(config)))


@flow(name="general_rl", log_prints=True, on_failure=[named_by_its_run_id])
def general_rl(config: GeneralRlConfig, eval_settings: GeneralEvalSettings | None = None) -> StageResult:
    """GRPO + IcePop with the configured (by default mixed) reward; held-out rule compliance and reward before and after.

    Args:
        config: the general RL run: init checkpoint, prompt datasets, reward modules (rules, ORM, GRM), compute.
        eval_settings: how held-out rule compliance and reward are measured before and after: prompts, seed.
    """
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "general_rl")
    eval_settings = with_run_seed(eval_settings or GeneralEvalSettings(), config.seed)
    with ExitStack() as stack:
        config = with_shared_engine(stack, config)
        before = evaluate_rules_and_rewards(config, config.init_checkpoint, eval_settings)
        trained = train_general_rl(config)
        after = evaluate_rules_and_rewards(config, trained.checkpoint, eval_settings)
    publish_stage("general_rl", config, trained, before, after)
    return StageResult(trained, before, after)
