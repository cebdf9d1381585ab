"""Picking a store from a root: ``file://``, a plain path, or ``s3://bucket/prefix``."""

import os
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote, urlsplit

from pydantic import AfterValidator

from .artifact import CommittedArtifact
from .file_backend import FileBackend
from .keys import validate_name
from .s3_backend import S3Backend
from .s3_client import S3Settings, make_s3_client
from .store import ArtifactStore, BlobStore

DEFAULT_ROOT = "./artifacts"
# S3's bucket naming rules: 3 to 63 lowercase letters, digits, dots and hyphens, a letter or digit at each end.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# Kernel and device file systems: an artifact written there would be written to a process or a device.
_PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))


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
    root = check_store_root(root or os.environ.get("POSTTRAIN_STORE") or DEFAULT_ROOT)
    parts = urlsplit(root)
    if parts.scheme == "s3":
        return S3Store(parts.netloc, parts.path.strip("/"), s3)
    return FileStore(local_root(root))


def check_store_root(root: str) -> str:
    """`root` if it can be a store's root, else a ValueError naming it and what is wrong: an s3:// root is
    a bucket name and a prefix of artifact-name segments (no '..', which S3 keeps as literal key text, no
    host or port); a local one is a folder outside the kernel's and devices' file systems."""
    parts = urlsplit(root)
    if parts.scheme == "s3":
        if not _BUCKET.fullmatch(parts.netloc):
            raise ValueError(f"store {root!r}: {parts.netloc!r} is not an S3 bucket name (s3://bucket[/prefix]; "
                             "the endpoint is set by POSTTRAIN_S3_ENDPOINT_URL, not in the root)")
        if parts.query or parts.fragment:
            raise ValueError(f"store {root!r}: an s3:// root has no ?query or #fragment")
        if parts.path.strip("/"):
            try:
                validate_name(parts.path.strip("/"))
            except ValueError as error:
                raise ValueError(f"store {root!r}: its prefix: {error}") from None
        return root
    if parts.scheme not in ("", "file"):
        raise ValueError(f"store {root!r}: unsupported store scheme {parts.scheme!r} (use file:// or s3://)")
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise ValueError(f"store {root!r}: file URIs on another host are not supported")
    folder = Path(local_root(root)).resolve()
    if any(folder == system or system in folder.parents for system in _PSEUDO_FILE_SYSTEMS):
        raise ValueError(f"store {root!r}: {folder} is on a kernel or device file system, not a folder for artifacts")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"store {root!r}: {folder} exists and is not a folder")
    return root


# A store root in a spec, a form or a config: refused as it is read, naming the field, not at the first write.
StoreRoot = Annotated[str, AfterValidator(check_store_root)]


def local_root(root: str) -> str:
    """A local root's folder: the path of a file:// URI, or the plain path itself."""
    return unquote(urlsplit(root).path) if root.startswith("file:") else root


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
