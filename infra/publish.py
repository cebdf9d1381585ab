"""Commit local outputs to the store with their lineage record, and refer to committed artifacts."""

from __future__ import annotations

import hashlib
from pathlib import Path

from data_contracts.lineage import DataInput, Lineage, ParentRef
from infra.store import ArtifactStore, CommittedArtifact, sha256_file


def content_digest(local_dir: str | Path) -> str:
    """sha256 over every file's relative path and sha256: equal directories, equal digests."""
    root = Path(local_dir)
    listing = "".join(
        f"{path.relative_to(root).as_posix()}\0{sha256_file(path)}\n" for path in sorted(root.rglob("*")) if path.is_file()
    )
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def publish_directory(store: ArtifactStore, name: str, local_dir: str | Path, lineage: Lineage) -> CommittedArtifact:
    """Every file under local_dir becomes part of the artifact `name`; commits are idempotent."""
    writer = store.begin(name)
    writer.put_dir(local_dir)
    return writer.commit(lineage.to_bytes())


def parent_ref(artifact: CommittedArtifact, role: str) -> ParentRef:
    return ParentRef(role=role, uri=artifact.uri, digest=artifact.digest)


def data_input(artifact: CommittedArtifact, rows: int | None = None, contract: str | None = None) -> DataInput:
    return DataInput(uri=artifact.uri, digest=artifact.digest, rows=rows, contract=contract)


def published_contract(dataset: CommittedArtifact) -> str | None:
    """The contract a dataset was published under (chat@1, prompt@1, ...), as its lineage records it."""
    return Lineage.model_validate(dataset.lineage()).config.get("contract")
