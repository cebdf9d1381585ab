"""The lineage record a stage writes for the checkpoint it commits."""

from __future__ import annotations

from data_contracts.lineage import (
    DataInput,
    Lineage,
    PrefectRunRef,
    RewardModuleRef,
    config_digest,
    current_code_version,
    library_versions,
)
from infra.publish import parent_ref
from infra.store import ArtifactStore, CommittedArtifact, open_store
from stages.common.config import Provenance


def stage_lineage(
    *, name: str, config: dict, seed: int, init: CommittedArtifact, inputs: list[DataInput], provenance: Provenance,
    teachers: list[CommittedArtifact] = (), reward_modules: list[RewardModuleRef] = (),
    reward_models: list[CommittedArtifact] = (), eval_summary: dict[str, float] | None = None,
) -> Lineage:
    prefect = None
    if provenance.flow_run_id or provenance.deployment_id:
        prefect = PrefectRunRef(flow_run_id=provenance.flow_run_id, deployment_id=provenance.deployment_id,
                                flow_name=provenance.flow_name)
    return Lineage(
        kind="checkpoint", name=name,
        parents=[parent_ref(init, "init"), *(parent_ref(teacher, "teacher") for teacher in teachers),
                 *(parent_ref(model, "reward_model") for model in reward_models)],
        inputs=inputs, code=current_code_version(), config=config, config_sha256=config_digest(config),
        reward_modules=list(reward_modules), libraries=library_versions(), seed=seed, prefect=prefect,
        triggered_by=provenance.triggered_by, wandb_run=provenance.wandb_run, eval_summary=eval_summary or {},
    )


def reward_model_checkpoints(refs: list[RewardModuleRef], default_store: ArtifactStore) -> list[CommittedArtifact]:
    """The checkpoints reward modules score with (an ORM, a GRM's judge): each module whose params name
    a `checkpoint` (in its own `store`, or the stage's). They are the reward models of the lineage DAG."""
    models = {}
    for ref in refs:
        if isinstance(ref.params.get("checkpoint"), str):
            store = open_store(ref.params["store"]) if ref.params.get("store") else default_store
            artifact = store.open(ref.params["checkpoint"])
            models[artifact.uri] = artifact
    return list(models.values())
