"""Checks a stage flow runs before any compute."""

from __future__ import annotations

from prefect import task

from infra.publish import published_contract
from infra.references import UnresolvedReference, resolve_checkpoint, resolve_dataset
from infra.store import open_store
from stages.common.config import StageIO


@task
def validate_stage_inputs(config: StageIO, stage: str) -> StageIO:
    """The config with every reference resolved to the URI of a committed artifact, so its lineage
    records what was read: `STAGE:latest`, `SUITE:latest`, names inside the store and URIs are taken.
    The init checkpoint (and each teacher's) must be a Hugging Face checkpoint, each dataset one of the
    stage's contract with both splits. A failure names the field, before any engine or job starts."""
    store = open_store(config.store)
    update: dict = {"init_checkpoint": resolve_checkpoint(store, config.init_checkpoint, "init_checkpoint")}
    teachers = getattr(config, "teachers", None)
    if teachers is not None:  # distillation: its datasets are its teachers'
        update["teachers"] = [teacher.model_copy(update={
            "checkpoint": resolve_checkpoint(store, teacher.checkpoint, f"teachers[{i}].checkpoint"),
            "datasets": [resolve_dataset(store, uri, f"teachers[{i}].datasets[{j}]") for j, uri in enumerate(teacher.datasets)],
        }) for i, teacher in enumerate(teachers)]
        update["datasets"] = sorted({uri for teacher in update["teachers"] for uri in teacher.datasets})
    else:
        update["datasets"] = [resolve_dataset(store, uri, f"datasets[{i}]") for i, uri in enumerate(config.datasets)]
    for index, uri in enumerate(update["datasets"]):
        contract = published_contract(store.open(uri))
        if not config.accepts_contract(contract):
            raise UnresolvedReference(f"datasets[{index}]: {uri}: dataset contract is {contract!r}, "
                                      f"{stage} reads {config.dataset_contract.id}")
    return config.model_copy(update=update)
