"""The JSON documents of the commit protocol: manifest, lineage and success marker.

Everything is serialised canonically (sorted keys, no whitespace, ASCII) so that the
same content always yields the same bytes, and therefore the same digest.
"""

import json
from dataclasses import dataclass
from typing import Any

from .hashing import sha256_bytes
from .keys import validate_relpath

MANIFEST_FORMAT = 1


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    files: dict[str, FileEntry]

    def to_bytes(self) -> bytes:
        files = {path: {"sha256": e.sha256, "size": e.size} for path, e in self.files.items()}
        return canonical_json({"format": MANIFEST_FORMAT, "files": files})

    @property
    def digest(self) -> str:
        """The artifact digest: identical files give an identical digest, wherever stored."""
        return sha256_bytes(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        doc = json.loads(data)
        if doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unsupported manifest format {doc.get('format')!r}")
        # Paths become local paths on download: never trust them to stay inside the target.
        return cls({validate_relpath(path): FileEntry(e["sha256"], e["size"]) for path, e in doc["files"].items()})


@dataclass(frozen=True)
class SuccessMarker:
    """Content of ``_SUCCESS``: pins the exact manifest and lineage bytes that were committed."""

    manifest_sha256: str
    lineage_sha256: str

    def to_bytes(self) -> bytes:
        return canonical_json({"manifest_sha256": self.manifest_sha256, "lineage_sha256": self.lineage_sha256})

    @classmethod
    def from_bytes(cls, data: bytes) -> "SuccessMarker":
        doc = json.loads(data)
        return cls(doc["manifest_sha256"], doc["lineage_sha256"])


def encode_lineage(lineage: bytes | dict[str, Any]) -> bytes:
    """Lineage as stored. Given bytes are kept verbatim but must hold a JSON object,
    because readers get it back through ``CommittedArtifact.lineage() -> dict``."""
    if isinstance(lineage, dict):
        return canonical_json(lineage)
    if not isinstance(json.loads(lineage), dict):
        raise ValueError("lineage bytes must encode a JSON object")
    return bytes(lineage)
