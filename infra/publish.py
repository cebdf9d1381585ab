"""Commit local outputs to the store with their lineage record, and refer to committed artifacts."""

from __future__ import annotations

from pathlib import Path

from data_contracts.lineage import DataInput, Lineage, ParentRef
from infra.store import ArtifactStore, CommittedArtifact


def publish_directory(store: ArtifactStore, name: str, local_dir: str | Path, lineage: Lineage) -> CommittedArtifact:
    """Every file under local_dir becomes part of the artifact `name`; commits are idempotent."""
    writer = store.begin(name)
    writer.put_dir(local_dir)
    return writer.commit(lineage.to_bytes())


def parent_ref(artifact: CommittedArtifact, role: str) -> ParentRef:
    return ParentRef(role=role, uri=artifact.uri, digest=artifact.digest)


def data_input(artifact: CommittedArtifact, rows: int | None = None, contract: str | None = None) -> DataInput:
    return DataInput(uri=artifact.uri, digest=artifact.digest, rows=rows, contract=contract)
