"""What an auditor's lineage tool reads of a stage run: OpenLineage events that follow the spec and say what
the checkpoint's lineage.json says."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

import infra
from infra.openlineage import dataset_name
from infra.store import CommittedArtifact

RUN_EVENT = json.loads((Path(__file__).parent / "openlineage_run_event.json").read_text())
FACETS = json.loads((Path(infra.__file__).parent / "openlineage_facets.json").read_text())
REGISTRY = Registry().with_resource(FACETS["$id"], Resource.from_contents(FACETS))


def _validator(schema: dict) -> Draft202012Validator:
    return Draft202012Validator(schema, registry=REGISTRY, format_checker=FormatChecker())


def validate_event(event: dict) -> None:
    """The event against OpenLineage's RunEvent, and our facets in it against their own schema."""
    _validator(RUN_EVENT).validate(event)
    _validator({"$ref": f"{FACETS['$id']}#/$defs/PosttrainRunFacet"}).validate(event["run"]["facets"]["posttrain"])
    for dataset in event["inputs"] + event["outputs"]:
        _validator({"$ref": f"{FACETS['$id']}#/$defs/PosttrainDatasetFacet"}).validate(dataset["facets"]["posttrain"])


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_complete_event(event: dict, checkpoint: CommittedArtifact) -> None:
    """A COMPLETE event's inputs are the checkpoint's parents and inputs, in lineage.json's order and with its
    digests; its output is the checkpoint."""
    lineage = checkpoint.lineage()
    expected = [(dataset_name(ref["uri"]), ref["digest"], ref["role"]) for ref in lineage["parents"] + lineage["inputs"]]
    got = [((d["namespace"], d["name"]), d["facets"]["version"]["datasetVersion"], d["facets"]["posttrain"]["role"])
           for d in event["inputs"]]
    assert got == expected
    (output,) = event["outputs"]
    assert ((output["namespace"], output["name"]), output["facets"]["version"]["datasetVersion"]) == (
        dataset_name(checkpoint.uri), checkpoint.digest)
    assert event["run"]["facets"]["posttrain"]["configSha256"] == lineage["config_sha256"]
    assert event["run"]["facets"]["posttrain"]["rewardModules"] == lineage["reward_modules"]
