"""Reading the samples a checkpoint's stage trained on: the rollout@1 shards its lineage lists as `rollouts`."""

from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from data_contracts import ROLLOUT_V1
from data_contracts.lineage import DataInput, Lineage
from data_contracts.validate import validate_table
from infra.lineage import name_in_store, own_store
from infra.store import ArtifactStore, CommittedArtifact, open_artifact

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


def recorded_shards(checkpoint: CommittedArtifact) -> list[Shard]:
    """The checkpoint's rollout shards in step and rank order; [] for a stage that records none (SFT). They are
    read in the checkpoint's own store, where it lies now (a copied or moved store shows its own samples); a
    record written before lineage named artifacts in their store is read by its URIs."""
    lineage = Lineage.model_validate(checkpoint.lineage())
    store = own_store(checkpoint.uri, lineage)
    shards = []
    for data in lineage.inputs:
        if data.role == "rollouts":
            artifact = open_artifact(data.uri) if store is None else store.open(_inside(store, data, checkpoint))
            config = Lineage.model_validate(artifact.lineage()).config
            shards.append(Shard(artifact, int(config["step"]), int(config["rank"])))
    return sorted(shards, key=lambda shard: (shard.step, shard.rank))


def _inside(store: ArtifactStore, shard: DataInput, checkpoint: CommittedArtifact) -> str:
    name = name_in_store(store, shard)
    if name is None:
        raise ValueError(f"{checkpoint.uri}: its rollout shard {shard.uri} is outside its store {store.root_uri}")
    return name
