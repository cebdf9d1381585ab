"""The deployments' forms offer what the store holds: checkpoint and dataset fields become a choice between the
store's references and free text; an empty store leaves them free text."""

from pathlib import Path

from prefect.utilities.callables import parameter_schema

from data_contracts.lineage import Lineage
from flows.pickers import store_catalog, with_pickers
from flows.serve import FLOWS
from infra.publish import publish_directory
from infra.references import resolve_checkpoint
from infra.store import open_store


def test_a_store_s_checkpoints_and_datasets_become_choices_and_an_empty_store_changes_nothing(tmp_path: Path):
    schema = parameter_schema(FLOWS["distill"]).model_dump()
    store = open_store(str(tmp_path / "store"))
    assert with_pickers(schema, store_catalog(store)) == schema

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "config.json").write_text("{}")
    for name, label in (("checkpoints/sft/run-1", "sft run-1 step 5"), ("datasets/arith-0123", "arith"),
                        ("checkpoints/sft/run-1-rollouts/step-000001-rank-0000-ab", "sft run-1 rollouts step 1 rank 0"),
                        ("checkpoints/sft/run-1-steps/step-000002", "sft run-1 step 2")):
        publish_directory(store, name, tmp_path / "files",
                          Lineage(kind="checkpoint" if "checkpoints" in name else "dataset", name=label,
                                  eval_summary={"heldout_loss": 0.25} if "sft" in name else {}))
    picked = with_pickers(schema, store_catalog(store))
    student = picked["definitions"]["DistillConfig"]["properties"]["init_checkpoint"]
    # Not what the run committed beside its checkpoint: its rollout shards and resume points.
    assert student["anyOf"][0]["enum"] == ["sft:latest", "checkpoints/sft/run-1"]
    # sft:latest is the checkpoint too, though its rollout shard and resume point were committed after it.
    assert resolve_checkpoint(store, "sft:latest", "init_checkpoint") == store.open("checkpoints/sft/run-1").uri
    assert "In the store: sft:latest: sft, " in student["description"] and "heldout_loss 0.25" in student["description"]
    teacher = picked["definitions"]["TeacherSpec"]["properties"]
    assert teacher["checkpoint"]["anyOf"][0]["enum"] == ["sft:latest", "checkpoints/sft/run-1"]
    # A list: a multi-select of the store's datasets, or free texts; what the field checked stays on both.
    in_store, free = teacher["datasets"]["anyOf"]
    assert in_store["items"]["enum"] == ["arith:latest", "datasets/arith-0123"] and in_store["minItems"] == 1
    assert free == {"title": "URIs or names", "type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
