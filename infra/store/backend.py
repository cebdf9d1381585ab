"""The tiny blob interface the commit protocol is written against.

Keys are ``/``-separated and relative to the backend's root; the commit protocol,
reader and verifier live above this line once, for every storage system.
"""

from pathlib import Path
from typing import Protocol


class BlobBackend(Protocol):
    @property
    def root_uri(self) -> str:
        """URI of the root, e.g. ``file:///data/artifacts`` or ``s3://bucket/prefix``."""
        ...

    def put_file(self, key: str, local_path: Path, sha256: str, size: int) -> None:
        """Store a local file; raise IntegrityError unless what landed matches sha256/size."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """Store data only if key does not exist, atomically against every other writer; False
        when it existed (with other bytes: data is unique to its writer, so finding our own bytes
        means an earlier attempt landed). The commit protocol's claims and ``_SUCCESS`` rest on this."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """Raise BlobNotFoundError when the key is absent."""
        ...

    def download_file(self, key: str, local_path: Path) -> str:
        """Write the blob to local_path and return the sha256 of the bytes written.

        Raise BlobNotFoundError when the key is absent.
        """
        ...

    def exists(self, key: str) -> bool: ...

    def list_prefix(self, prefix: str) -> list[str]:
        """All keys starting with prefix (a plain string prefix, not a directory), sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove a key; absent keys are not an error."""
        ...
