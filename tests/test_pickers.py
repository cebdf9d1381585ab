"""The deployments' forms offer what the store holds: checkpoint and dataset fields become a choice between the
store's references and free text; an empty store leaves them free text."""

from pathlib import Path

from prefect.utilities.callables import parameter_schema

from data_contracts.lineage import Lineage
from flows.pickers import store_catalog, with_pickers
from flows.serve import FLOWS
from infra.publish import publish_directory
from infra.store import open_store


def test_a_store_s_checkpoints_and_datasets_become_choices_and_an_empty_store_changes_nothing(tmp_path: Path):
    schema = parameter_schema(FLOWS["distill"]).model_dump()
    store = open_store(str(tmp_path / "store"))
    assert with_pickers(schema, store_catalog(store)) == schema

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "config.json").write_text("{}")
    for name, label in (("checkpoints/sft/run-1", "sft run-1 step 5"), ("datasets/arith-0123", "arith")):
        publish_directory(store, name, tmp_path / "files",
                          Lineage(kind="checkpoint" if "checkpoints" in name else "dataset", name=label,
                                  eval_summary={"heldout_loss": 0.25} if "sft" in name else {}))
    picked = with_pickers(schema, store_catalog(store))
    student = picked["definitions"]["DistillConfig"]["properties"]["init_checkpoint"]
    assert student["anyOf"][0]["enum"] == ["sft:latest", "checkpoints/sft/run-1"]
    assert "In the store: sft:latest: sft, " in student["description"] and "heldout_loss 0.25" in student["description"]
    teacher = picked["definitions"]["TeacherSpec"]["properties"]
    assert teacher["checkpoint"]["anyOf"][0]["enum"] == ["sft:latest", "checkpoints/sft/run-1"]
    assert teacher["datasets"]["items"]["anyOf"][0]["enum"] == ["arith:latest", "datasets/arith-0123"]
    assert teacher["datasets"]["minItems"] == 1  # what the field checked stays
