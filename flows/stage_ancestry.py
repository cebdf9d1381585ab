"""Which stage made a checkpoint, and the checkpoints of the stages before it, read from lineage.

`posttrain pipeline --from-stage NAME --init URI` starts from any committed checkpoint; the later
stages still need what came before (the ORM's SFT trunk, distillation's teachers), and the
checkpoint's own lineage says where those are: its chain of `init` parents.
"""

from __future__ import annotations

from data_contracts.lineage import Lineage
from infra.lineage import name_in_store
from infra.store import ArtifactStore


def made_by(lineage: Lineage) -> str:
    """The stage that committed a checkpoint: stages name their checkpoints "<stage> <run_id> step <n>"."""
    return lineage.name.split(" ", 1)[0]


def stage_outputs(store: ArtifactStore, uri: str) -> dict[str, str]:
    """{stage: checkpoint URI} along the `init` chain from `uri` (itself included), the nearest of each stage."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    current: str | None = uri
    while current is not None and current not in seen:
        seen.add(current)
        artifact = store.open(current)
        lineage = Lineage.model_validate(artifact.lineage())
        found.setdefault(made_by(lineage), artifact.uri)
        init = next((parent for parent in lineage.parents if parent.role == "init"), None)
        current = None if init is None else name_in_store(store, init)  # where the store lies now
    return found
