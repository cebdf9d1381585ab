"""Checks a stage flow runs before any compute."""

from __future__ import annotations

from prefect import task

from infra.publish import published_contract
from infra.store import open_store
from stages.common.config import StageIO


@task
def validate_stage_inputs(config: StageIO, stage: str) -> None:
    """Every input must be committed: the init checkpoint a Hugging Face one, the datasets of the stage's contract with both splits."""
    store = open_store(config.store)
    init = store.open(config.init_checkpoint)
    if "config.json" not in init.manifest.files:
        raise ValueError(f"{init.uri}: not a Hugging Face checkpoint (no config.json)")
    for uri in config.datasets:
        dataset = store.open(uri)
        missing = {"train.parquet", "test.parquet"} - set(dataset.manifest.files)
        if missing:
            raise ValueError(f"{uri}: dataset lacks {', '.join(sorted(missing))}")
        contract = published_contract(dataset)
        if not config.accepts_contract(contract):
            raise ValueError(f"{uri}: dataset contract is {contract!r}, {stage} reads {config.dataset_contract.id}")
