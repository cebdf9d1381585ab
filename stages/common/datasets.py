"""The rows of committed datasets, downloaded once per rank and checked against their exact Arrow schema."""

from __future__ import annotations

from pathlib import Path

from data_contracts import CHAT_V1, read_parquet
from data_contracts.contract import Contract
from infra.store import CommittedArtifact


def load_split(datasets: list[CommittedArtifact], split: str, workdir: Path, contract: Contract = CHAT_V1) -> list[dict]:
    """All rows of `split` across the datasets, in dataset order (deterministic), checked against `contract`."""
    rows: list[dict] = []
    for index, dataset in enumerate(datasets):
        local = workdir / f"dataset-{index}"
        if not (local / f"{split}.parquet").exists():
            dataset.download(local)
        rows += read_parquet(contract, local / f"{split}.parquet").to_pylist()
    return rows
