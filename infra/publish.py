"""Commit local outputs to the store with their lineage record, and refer to committed artifacts."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from data_contracts.lineage import DataInput, Lineage, ParentRef
from infra.store import ArtifactExistsError, ArtifactStore, CommittedArtifact, sha256_file

log = logging.getLogger(__name__)


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
    return writer.commit(lineage.committed_as(store.root_uri, name).to_bytes())


def publish_for_inputs(store: ArtifactStore, name: str, local_dir: str | Path, lineage: Lineage) -> CommittedArtifact:
    """`publish_directory` for a name that stands for its inputs (a stage's config, inputs and code; an
    evaluation's checkpoint and settings). When another run of the same inputs committed the name first with
    other bytes (an asynchronous stage, an evaluation's timestamps), that artifact stands and is returned:
    two pipelines sharing a store then go on from the same one."""
    try:
        return publish_directory(store, name, local_dir, lineage)
    except ArtifactExistsError as error:
        log.warning("%s; another run of the same inputs committed it first, so that one stands", error)
        return store.open(name)


def parent_ref(artifact: CommittedArtifact, role: str) -> ParentRef:
    return ParentRef(role=role, uri=artifact.uri, digest=artifact.digest)


def data_input(artifact: CommittedArtifact, rows: int | None = None, contract: str | None = None) -> DataInput:
    return DataInput(uri=artifact.uri, digest=artifact.digest, rows=rows, contract=contract)


def published_contract(dataset: CommittedArtifact) -> str | None:
    """The contract a dataset was published under (chat@1, prompt@1, ...), as its lineage records it."""
    return Lineage.model_validate(dataset.lineage()).config.get("contract")


def published_suite(dataset: CommittedArtifact) -> str | None:
    """The embedded suite a dataset was generated from, as its lineage records it (None for imported data)."""
    return Lineage.model_validate(dataset.lineage()).config.get("suite")
