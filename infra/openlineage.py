"""Lineage in the ecosystem's format: an OpenLineage run (START, then COMPLETE or FAIL) for every stage run,
so an auditor's own lineage tool (Marquez, DataHub, ...) shows the pipeline beside our lineage.json.

A COMPLETE event's inputs are the checkpoint's lineage.json, entry for entry: its parents (init, teachers,
reward models) and its inputs (prompt datasets, the rollout shards it trained on); its output is the
checkpoint. Datasets are named the OpenLineage way (a file:// artifact in namespace `file` by its path, an
s3:// one in `s3://bucket` by its key), versioned by their digest (the standard `version` facet), and carry a
`posttrain` facet (role, digest, kind, rows, contract); the run carries one with the stage, code, config
digest, seed, scheduler job and reward modules, and a `parent` facet naming the Prefect flow run.

Events go to a JSON-lines file, and to the transport OpenLineage's own settings name when an operator sets
them (OPENLINEAGE_URL with OPENLINEAGE_API_KEY, or an OPENLINEAGE_CONFIG file): the way every OpenLineage
integration is pointed at a Marquez or a DataHub.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import attr
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    RunFacet,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    parent_run,
)
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.uuid import generate_new_uuid

from data_contracts.lineage import Lineage
from infra.store import CommittedArtifact

log = logging.getLogger(__name__)

# Who wrote the events: this project (OpenLineage asks for a URI).
PRODUCER = "urn:posttrain"
EVENTS_FILE_ENV = "POSTTRAIN_OPENLINEAGE_FILE"
NAMESPACE_ENV = "POSTTRAIN_OPENLINEAGE_NAMESPACE"
# OpenLineage's own settings: when any is set, events also go where they say.
OPERATOR_SETTINGS = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG")
# Our facets' schema: shipped beside this module (openlineage_facets.json), named by a URN since no
# server publishes it.
FACETS_SCHEMA = "urn:posttrain:openlineage:facets:1#/$defs/"


@attr.define
class PosttrainDatasetFacet(DatasetFacet):
    """A committed artifact as our lineage knows it."""

    role: str
    digest: str
    kind: str | None = attr.field(default=None)
    rows: int | None = attr.field(default=None)
    contract: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return FACETS_SCHEMA + "PosttrainDatasetFacet"


@attr.define
class PosttrainRunFacet(RunFacet):
    """What made a stage run reproducible and auditable (lineage.json has the rest)."""

    stage: str
    runId: str  # noqa: N815 (the OpenLineage casing)
    job: str | None = attr.field(default=None)
    gitSha: str | None = attr.field(default=None)  # noqa: N815
    configSha256: str | None = attr.field(default=None)  # noqa: N815
    seed: int | None = attr.field(default=None)
    rewardModules: list[dict] = attr.field(factory=list)  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return FACETS_SCHEMA + "PosttrainRunFacet"


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of an artifact URI by OpenLineage's naming: file:///a/b → ("file", "/a/b"),
    s3://bucket/a/b → ("s3://bucket", "a/b")."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return "file", parsed.path
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/")


class StageRunEvents:
    """The OpenLineage run of one stage run: `start()` as its job launches, then `complete(checkpoint)` or
    `fail(error)`. Emitting never fails the stage: an unreachable lineage server is logged and skipped."""

    def __init__(self, stage: str, run_id: str, flow_run_id: str | None = None, flow_name: str | None = None):
        self.stage, self.run_id = stage, run_id
        self.namespace = os.environ.get(NAMESPACE_ENV, "posttrain")
        self.ol_run_id = str(generate_new_uuid())
        self.parent = None
        if flow_run_id and flow_name:
            self.parent = parent_run.ParentRunFacet(run=parent_run.Run(runId=flow_run_id),
                                                    job=parent_run.Job(namespace="prefect", name=flow_name))
        self.clients = event_clients()

    def start(self) -> None:
        self._emit(RunState.START, {"posttrain": PosttrainRunFacet(stage=self.stage, runId=self.run_id)})

    def complete(self, checkpoint: CommittedArtifact) -> None:
        lineage = Lineage.model_validate(checkpoint.lineage())
        inputs = [_input(parent.uri, parent.role, parent.digest) for parent in lineage.parents]
        inputs += [_input(data.uri, data.role, data.digest, rows=data.rows, contract=data.contract) for data in lineage.inputs]
        namespace, name = dataset_name(checkpoint.uri)
        output = OutputDataset(namespace=namespace, name=name, facets=_artifact_facets("output", checkpoint.digest,
                                                                                        kind=lineage.kind))
        facet = PosttrainRunFacet(
            stage=self.stage, runId=self.run_id, job=lineage.job, gitSha=lineage.code.git_sha,
            configSha256=lineage.config_sha256, seed=lineage.seed,
            rewardModules=[module.model_dump(mode="json") for module in lineage.reward_modules])
        self._emit(RunState.COMPLETE, {"posttrain": facet}, inputs, [output])

    def fail(self, error: BaseException) -> None:
        message = f"{type(error).__name__}: {error}"
        self._emit(RunState.FAIL, {"posttrain": PosttrainRunFacet(stage=self.stage, runId=self.run_id),
                                   "errorMessage": error_message_run.ErrorMessageRunFacet(
                                       message=message, programmingLanguage="python")})

    def _emit(self, state: RunState, facets: dict, inputs: list | None = None, outputs: list | None = None) -> None:
        if self.parent is not None:
            facets = {**facets, "parent": self.parent}
        job = Job(namespace=self.namespace, name=self.stage, facets={"jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="POSTTRAIN", jobType="STAGE")})
        event = RunEvent(eventType=state, eventTime=datetime.now(UTC).isoformat(), run=Run(runId=self.ol_run_id, facets=facets),
                         job=job, inputs=inputs or [], outputs=outputs or [], producer=PRODUCER)
        for client in self.clients:
            try:
                client.emit(event)
            except Exception as error:  # noqa: BLE001 (a lineage server's outage must not fail training)
                log.warning("OpenLineage %s event of %s not delivered by %s: %s", state.value, self.stage,
                            client.transport.kind, error)


def events_file() -> Path:
    """Where every event is appended as one JSON line: POSTTRAIN_OPENLINEAGE_FILE, default beside the runs."""
    default = Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / "openlineage" / "events.jsonl"
    return Path(os.environ.get(EVENTS_FILE_ENV) or default)


def event_clients() -> list[OpenLineageClient]:
    path = events_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    clients = [OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))]
    if any(os.environ.get(setting) for setting in OPERATOR_SETTINGS):
        clients.append(OpenLineageClient())  # reads OPENLINEAGE_URL / OPENLINEAGE_CONFIG itself
    return clients


def _input(uri: str, role: str, digest: str, **posttrain) -> InputDataset:
    namespace, name = dataset_name(uri)
    return InputDataset(namespace=namespace, name=name, facets=_artifact_facets(role, digest, **posttrain))


def _artifact_facets(role: str, digest: str, **posttrain) -> dict:
    return {"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=digest),
            "posttrain": PosttrainDatasetFacet(role=role, digest=digest, **posttrain)}
