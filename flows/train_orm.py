"""The train_orm flow: validate inputs, train the reward model, publish its held-out accuracy and lineage."""

from __future__ import annotations

from prefect import flow, task

from data_contracts.lineage import Lineage
from flows.cards import publish_stage
from flows.job import named_by_its_run_id, train_stage, with_flow_provenance
from flows.results import StageResult, Trained
from flows.stage_checks import validate_stage_inputs
from infra.store import open_store
from stages.orm.config import TrainOrmConfig

CHANCE = 0.5  # what pairwise accuracy is before training: a reward model that cannot tell the replies apart


@task
def train_reward_model(config: TrainOrmConfig) -> Trained:
    return train_stage(config)


@flow(name="train_orm", log_prints=True, on_failure=[named_by_its_run_id])
def train_orm(config: TrainOrmConfig) -> StageResult:
    """A scalar-head ORM on preference@1 pairs (Bradley–Terry); held-out pairwise accuracy, overall and per domain.

    Args:
        config: the ORM run: init checkpoint, preference datasets, optimizer, compute.
    """
    config = with_flow_provenance(config)
    config = validate_stage_inputs(config, "train_orm")
    trained = train_reward_model(config)
    lineage = Lineage.model_validate(open_store(config.store).open(trained.checkpoint).lineage())
    after = {name: value for name, value in lineage.eval_summary.items() if "accuracy" in name}
    before = dict.fromkeys(after, CHANCE)
    publish_stage("train_orm", config, trained, before, after)
    return StageResult(trained, before, after)
