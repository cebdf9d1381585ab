"""Picking a store from a root: ``file://``, a plain path, or ``s3://bucket/prefix``."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .artifact import CommittedArtifact
from .file_backend import FileBackend
from .s3_backend import S3Backend
from .s3_client import S3Settings, make_s3_client
from .store import ArtifactStore, BlobStore

DEFAULT_ROOT = "./artifacts"


class FileStore(BlobStore):
    def __init__(self, root: str | Path) -> None:
        super().__init__(FileBackend(Path(root)))


class S3Store(BlobStore):
    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None) -> None:
        settings = settings or S3Settings()
        super().__init__(S3Backend(make_s3_client(settings), bucket, prefix, settings))


def open_store(root: str | None = None, *, s3: S3Settings | None = None) -> ArtifactStore:
    """Open the store at root, else $POSTTRAIN_STORE, else ./artifacts.

    ``s3`` tunes multipart sizes and retries for s3:// roots.
    """
    root = root or os.environ.get("POSTTRAIN_STORE") or DEFAULT_ROOT
    parts = urlsplit(root)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"{root}: expected s3://bucket[/prefix]")
        return S3Store(parts.netloc, parts.path.strip("/"), s3)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{root}: file URIs on another host are not supported")
        return FileStore(unquote(parts.path))
    if parts.scheme == "":
        return FileStore(root)
    raise ValueError(f"{root}: unsupported store scheme {parts.scheme!r} (use file:// or s3://)")


def open_artifact(uri: str, *, s3: S3Settings | None = None) -> CommittedArtifact:
    """Open a committed artifact from its full URI alone (lineage records hold only URIs).

    The artifact's parent folder serves as the store root; a name is a path below any root, so
    the artifact is the same whichever root it is reached through.
    """
    if "://" not in uri:
        raise ValueError(f"{uri}: expected a full artifact URI (file://… or s3://…)")
    parent, _, name = uri.rstrip("/").rpartition("/")
    if parent.endswith(":/") or parent.endswith("://"):
        raise ValueError(f"{uri}: an artifact URI names a folder below the store root")
    return open_store(parent, s3=s3).open(name)
