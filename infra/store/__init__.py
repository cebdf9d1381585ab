"""Immutable, content-addressed artifact store over file:// and s3://.

An artifact is a directory of files plus manifest.json (sha256 and size per file),
lineage.json, and a final _SUCCESS marker; only artifacts with _SUCCESS exist for
readers. See writer.py for the commit protocol.
"""

from .artifact import CommittedArtifact
from .errors import (
    ArtifactExistsError,
    ArtifactNotCommittedError,
    ArtifactStoreError,
    IntegrityError,
)
from .factory import FileStore, S3Store, StoreRoot, check_store_root, open_artifact, open_store
from .hashing import sha256_file
from .records import FileEntry, Manifest
from .retry import RetryPolicy
from .s3_client import S3Settings
from .store import ArtifactStore
from .writer import ArtifactWriter

__all__ = [
    "StoreRoot",
    "check_store_root",
    "ArtifactExistsError",
    "ArtifactNotCommittedError",
    "ArtifactStore",
    "ArtifactStoreError",
    "ArtifactWriter",
    "CommittedArtifact",
    "FileEntry",
    "FileStore",
    "IntegrityError",
    "Manifest",
    "RetryPolicy",
    "S3Settings",
    "S3Store",
    "open_artifact",
    "open_store",
    "sha256_file",
]
