"""Blob backend over a local (or network-mounted) directory.

Every write goes to a temp file (named for its writer) in the destination directory and is
renamed into place, so a reader or a crash never sees a torn file; files and their directory
are fsynced before the rename counts, so a durable ``_SUCCESS`` implies durable data. An
exclusive create links the temp file instead of renaming it: link(2) fails if the target
exists, on local file systems and NFS alike.
"""

import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import BlobNotFoundError, IntegrityError
from .hashing import CHUNK_SIZE


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[BinaryIO], None], exclusive: bool = False) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return True


def _copy_hashing(source: BinaryIO, target: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK_SIZE):
        digest.update(chunk)
        target.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


class FileBackend:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def root_uri(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def put_file(self, key: str, local_path: Path, sha256: str, size: int) -> None:
        def write(target: BinaryIO) -> None:
            # Hash what is actually copied: the source may have changed since it was hashed.
            with open(local_path, "rb") as source:
                copied = _copy_hashing(source, target)
            if copied != (sha256, size):
                raise IntegrityError(
                    f"{local_path} changed while storing {key}: expected sha256 {sha256} size {size}, "
                    f"copied sha256 {copied[0]} size {copied[1]}"
                )

        _atomic_write(self._path(key), write)

    def put_bytes(self, key: str, data: bytes) -> None:
        _atomic_write(self._path(key), lambda target: target.write(data))

    def create_exclusive(self, key: str, data: bytes) -> bool:
        return _atomic_write(self._path(key), lambda target: target.write(data), exclusive=True)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise BlobNotFoundError(f"{self.root_uri}/{key} does not exist") from None

    def download_file(self, key: str, local_path: Path) -> str:
        try:
            source = open(self._path(key), "rb")
        except FileNotFoundError:
            raise BlobNotFoundError(f"{self.root_uri}/{key} does not exist") from None
        with source, open(local_path, "wb") as target:
            return _copy_hashing(source, target)[0]

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_prefix(self, prefix: str) -> list[str]:
        # Walk only the deepest directory the prefix pins down, not the whole store.
        start = self._path(prefix.rpartition("/")[0]) if "/" in prefix else self.root
        keys = []
        for directory, _, files in os.walk(start):
            base = Path(directory).relative_to(self.root).as_posix()
            keys += [name if base == "." else f"{base}/{name}" for name in files]
        return sorted(key for key in keys if key.startswith(prefix))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
