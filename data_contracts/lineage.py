"""The lineage record: the audit trail written as lineage.json into every committed artifact.

Prefect's asset events expire and wandb cannot record inputs offline, so this file is the record an
auditor relies on: what an artifact was made from (parents and data inputs, by digest), by which
code and config, with which reward modules, libraries and seed, and who triggered it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import inspect
import json
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LINEAGE_FORMAT = 1
TRACKED_LIBRARIES = ("torch", "transformers", "deepspeed", "tokenizers", "pyarrow", "prefect", "pydantic", "wandb")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# A reference's `name`: the artifact's name in the store its record is committed to, relative to the store's root
# (None: it was in another store). An auditor's check follows names inside the store it is given, so a store
# copied, moved or restored from S3 verifies where it is now, and never reads bytes from where it was.


class ParentRef(_Record):
    """Another committed artifact this one was derived from. `source`: the dataset a filtered dataset's rows
    were chosen from; `evaluated`: the checkpoint an evaluation (or the difficulty filter's pass rates) measured."""

    role: Literal["init", "teacher", "reward_model", "tokenizer", "resume", "evaluated", "source"]
    uri: str  # where it was when this record was written
    digest: str
    name: str | None = None


class DataInput(_Record):
    """A committed data artifact read by the run."""

    uri: str  # where it was when this record was written
    digest: str
    name: str | None = None
    rows: int | None = None
    contract: str | None = None
    # "rollouts": the samples the run trained on (rollout@1 shards it wrote), not data it read.
    role: Literal["data", "rollouts"] = "data"


class CodeVersion(_Record):
    git_sha: str | None = None
    dirty: bool | None = None


class RewardModuleRef(_Record):
    path: str
    source_sha256: str
    params: dict[str, Any] = Field(default_factory=dict)


class PrefectRunRef(_Record):
    flow_run_id: str | None = None
    deployment_id: str | None = None
    flow_name: str | None = None


class MtpRecord(_Record):
    """A checkpoint's multi-token prediction layers (model/mtp.py): how many it carries, and whether the stage that
    made it trained them, at how many depths."""

    layers: int
    trained: bool
    depths: int | None = None


class Lineage(_Record):
    format: Literal[1] = LINEAGE_FORMAT
    kind: Literal["checkpoint", "dataset", "tokenizer", "eval", "report"]
    name: str
    parents: list[ParentRef] = Field(default_factory=list)
    inputs: list[DataInput] = Field(default_factory=list)
    code: CodeVersion = Field(default_factory=CodeVersion)
    config: dict[str, Any] = Field(default_factory=dict)
    config_sha256: str | None = None
    reward_modules: list[RewardModuleRef] = Field(default_factory=list)
    libraries: dict[str, str] = Field(default_factory=dict)
    seed: int | None = None
    prefect: PrefectRunRef | None = None
    # The job that made it, as its scheduler names it: slurm:1234, kubernetes:ns/name, local:host:pid.
    job: str | None = None
    triggered_by: str | None = None
    wandb_run: str | None = None
    eval_summary: dict[str, float] = Field(default_factory=dict)
    # A checkpoint that carries MTP layers says so; None for one without, and for other artifacts.
    mtp: MtpRecord | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    # This artifact's own name in its store: from the artifact's URI, the store's root today.
    stored_as: str | None = None

    def committed_as(self, root_uri: str, name: str) -> Lineage:
        """This record as committed to `name` in the store at `root_uri`: every reference inside that store
        named relative to its root."""
        def named(ref):
            inside = ref.uri.startswith(root_uri + "/")
            return ref.model_copy(update={"name": ref.uri[len(root_uri) + 1:] if inside else None})
        return self.model_copy(update={"stored_as": name, "parents": [named(p) for p in self.parents],
                                       "inputs": [named(i) for i in self.inputs]})

    def to_bytes(self) -> bytes:
        return (self.model_dump_json(indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Lineage:
        return cls.model_validate_json(data)


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(config)).hexdigest()


def current_code_version(repo_dir: Path | None = None) -> CodeVersion:
    """The git commit of the code that runs, and whether the work tree differs from it."""
    where = repo_dir or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return CodeVersion()
    return CodeVersion(git_sha=sha.stdout.strip(), dirty=bool(status.stdout.strip()))


def source_digest(*packages: str) -> str:
    """sha256 over the sources (.py, .jinja) of the project's `packages`: each file's path and bytes.

    Unlike the git commit it ignores edits elsewhere (docs, tests) and sees uncommitted ones.
    """
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted(p for p in (root / package).rglob("*") if p.suffix in (".py", ".jinja")):
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def reward_module_ref(dotted_path: str, params: dict[str, Any] | None = None) -> RewardModuleRef:
    """Pin a reward module by the sha256 of the source file that defines it."""
    module_name, _, attribute = dotted_path.rpartition(":") if ":" in dotted_path else dotted_path.rpartition(".")
    target = getattr(importlib.import_module(module_name), attribute)
    source = Path(inspect.getsourcefile(target) or "")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    return RewardModuleRef(path=dotted_path, source_sha256=digest, params=params or {})
