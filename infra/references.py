"""What a person types for a checkpoint or a dataset, resolved to the URI of a committed artifact.

`STAGE:latest` is the newest committed checkpoint of that stage (`checkpoints/STAGE/…`, not its step
checkpoints), `SUITE:latest` the newest committed dataset of that name; a plain name is relative to
the store; a URI is taken as it is. Each failure names the field it came from, so a form or a spec
says which of its entries is wrong before any process starts.
"""

from __future__ import annotations

from infra.store import ArtifactStore
from infra.store.errors import ArtifactStoreError

LATEST = ":latest"


class UnresolvedReference(ValueError):
    """A reference that names nothing committed; the message starts with the field."""


def _newest(store: ArtifactStore, names: list[str]) -> str | None:
    """The name whose lineage was created last (ISO timestamps sort as times)."""
    stamped = [(str(store.open(name).lineage().get("created_at", "")), name) for name in names]
    return max(stamped)[1] if stamped else None


def _resolve(store: ArtifactStore, reference: str, field: str, kind: str, newest_of, labels) -> str:
    """`newest_of(label)`: the newest committed name for `label:latest`; `labels()`: every label the store holds,
    offered in the message when the reference names nothing."""
    reference = reference.strip()
    if not reference:
        raise UnresolvedReference(f"{field}: empty; give {kind} name, NAME{LATEST} or a URI")
    if reference.endswith(LATEST) and "://" not in reference:
        label = reference[: -len(LATEST)]
        name = newest_of(label)
        if name is None:
            raise UnresolvedReference(f"{field}: {reference}: no committed {kind} named {label!r} in {store.root_uri}"
                                      + _offered(kind, labels()))
        return store.open(name).uri
    try:
        committed = store.is_committed(reference)
    except (ArtifactStoreError, ValueError) as error:  # a malformed name, a URI of another store
        raise UnresolvedReference(f"{field}: {reference}: {error}") from None
    if not committed:
        raise UnresolvedReference(f"{field}: {reference}: not a committed artifact in {store.root_uri}"
                                  + _offered(kind, labels()))
    return store.open(reference).uri


def _offered(kind: str, labels: list[str], most: int = 12) -> str:
    if not labels:
        return f"; it holds no {kind} yet"
    shown = ", ".join(f"{label}{LATEST}" for label in labels[:most])
    return f"; it holds {shown}" + (f" and {len(labels) - most} more" if len(labels) > most else "")


def stage_checkpoints(store: ArtifactStore, prefix: str = "checkpoints/") -> list[str]:
    """The committed checkpoints under `prefix` a stage published, without what it committed beside them while it
    trained: its resume points (`<output>-steps/`) and its rollout shards (`<output>-rollouts/`)."""
    return [name for name in store.list_committed(prefix) if "-steps/" not in name and "-rollouts/" not in name]


def resolve_checkpoint(store: ArtifactStore, reference: str, field: str) -> str:
    """A committed Hugging Face checkpoint's URI (it has a config.json)."""

    def newest_of(stage: str) -> str | None:
        return _newest(store, stage_checkpoints(store, f"checkpoints/{stage}/"))

    def stages() -> list[str]:
        return sorted({name.split("/")[1] for name in stage_checkpoints(store)})

    uri = _resolve(store, reference, field, "checkpoint", newest_of, stages)
    if "config.json" not in store.open(uri).manifest.files:
        raise UnresolvedReference(f"{field}: {reference}: not a checkpoint (it has no config.json)")
    return uri


def resolve_dataset(store: ArtifactStore, reference: str, field: str) -> str:
    """A committed dataset's URI (it has train and test splits)."""

    def newest_of(label: str) -> str | None:
        names = [n for n in store.list_committed(f"datasets/{label}-")
                 if store.open(n).lineage().get("name") == label]
        return _newest(store, names)

    def labels() -> list[str]:
        return sorted({str(store.open(n).lineage().get("name")) for n in store.list_committed("datasets/")})

    uri = _resolve(store, reference, field, "dataset", newest_of, labels)
    missing = {"train.parquet", "test.parquet"} - set(store.open(uri).manifest.files)
    if missing:
        raise UnresolvedReference(f"{field}: {reference}: not a dataset (no {', '.join(sorted(missing))})")
    return uri
