"""Reading the samples a checkpoint's stage trained on: the rollout@1 shards its lineage lists as `rollouts`."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from data_contracts import ROLLOUT_V1
from data_contracts.lineage import Lineage
from data_contracts.validate import validate_table
from infra.store import CommittedArtifact, open_artifact

SHARD_FILE = "rollouts.parquet"


@dataclass(frozen=True)
class Shard:
    artifact: CommittedArtifact
    step: int
    rank: int

    def table(self) -> pa.Table:
        """Its rows, every byte checked against the manifest and every row against rollout@1."""
        data = self.artifact.read_bytes(SHARD_FILE)
        return validate_table(ROLLOUT_V1, pq.read_table(io.BytesIO(data)), source=f"{self.artifact.uri}/{SHARD_FILE}",
                              max_tokens=2**31 - 1)


def recorded_shards(checkpoint: CommittedArtifact, opener: Callable[[str], CommittedArtifact] = open_artifact) -> list[Shard]:
    """The checkpoint's rollout shards in step and rank order; [] for a stage that records none (SFT)."""
    lineage = Lineage.model_validate(checkpoint.lineage())
    shards = []
    for data in lineage.inputs:
        if data.role == "rollouts":
            artifact = opener(data.uri)
            config = Lineage.model_validate(artifact.lineage()).config
            shards.append(Shard(artifact, int(config["step"]), int(config["rank"])))
    return sorted(shards, key=lambda shard: (shard.step, shard.rank))
