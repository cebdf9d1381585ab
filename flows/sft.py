"""The SFT flow: validate inputs, dispatch the DeepSpeed job, evaluate, publish what the UI shows."""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow, runtime, task

from data_contracts import CHAT_V1
from data_contracts.lineage import Lineage
from flows.cards import publish_lineage_card, publish_metrics_table
from flows.job import run_job
from infra.store import open_store
from stages.eval_stage import EvalSettings, evaluate_checkpoint
from stages.sft_config import SftConfig


@task
def validate_sft_inputs(config: SftConfig) -> None:
    """Fail before any compute: every input must be committed, and the datasets must be chat@1."""
    store = open_store(config.store)
    init = store.open(config.init_checkpoint)
    if "config.json" not in init.manifest.files:
        raise ValueError(f"{init.uri}: not a Hugging Face checkpoint (no config.json)")
    for uri in config.datasets:
        dataset = store.open(uri)
        missing = {"train.parquet", "test.parquet"} - set(dataset.manifest.files)
        if missing:
            raise ValueError(f"{uri}: dataset lacks {', '.join(sorted(missing))}")
        contract = Lineage.model_validate(dataset.lineage()).config.get("contract")
        if contract != CHAT_V1.id:
            raise ValueError(f"{uri}: dataset contract is {contract!r}, SFT reads {CHAT_V1.id}")


@task
def train_sft(config: SftConfig, nproc: int) -> dict:
    workdir = Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / config.run_id
    progress = run_job("sft", "stages.sft", config.model_dump_json(indent=2), workdir, nproc)
    return {"checkpoint": progress.final["checkpoint"], "history": progress.history}


@task
def evaluate(store_root: str | None, checkpoint: str, datasets: dict[str, str], settings: EvalSettings,
             attention: tuple[str, ...]) -> dict:
    return evaluate_checkpoint(open_store(store_root), checkpoint, datasets, settings, attention)


@flow(name="sft", log_prints=True)
def sft(config: SftConfig, datasets_by_suite: dict[str, str] | None = None, nproc: int = 1,
        eval_settings: EvalSettings | None = None) -> dict:
    """Train, then evaluate before/after (sparse and dense attention) on the held-out splits."""
    config = config.model_copy(update={"provenance": config.provenance.model_copy(update={
        "flow_run_id": str(runtime.flow_run.id), "deployment_id": runtime.deployment.id,
        "flow_name": runtime.flow_run.flow_name,
        "triggered_by": config.provenance.triggered_by or "prefect",
    })})
    validate_sft_inputs(config)
    eval_settings = eval_settings or EvalSettings()
    suites = datasets_by_suite or {}
    before = evaluate(config.store, config.init_checkpoint, suites, eval_settings, ("sparse",))
    trained = train_sft(config, nproc)
    after = evaluate(config.store, trained["checkpoint"], suites, eval_settings, ("sparse", "dense"))
    publish_metrics_table("sft", before["sparse"], after["sparse"])
    store = open_store(config.store)
    publish_lineage_card("sft", trained["checkpoint"],
                         Lineage.model_validate(store.open(trained["checkpoint"]).lineage()))
    return {"checkpoint": trained["checkpoint"], "history": trained["history"], "metrics_before": before["sparse"],
            "metrics_after": after["sparse"], "metrics_after_dense": after["dense"]}
