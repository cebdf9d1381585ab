"""The ArtifactStore interface and its one implementation over any BlobBackend."""

from typing import Protocol

from .artifact import CommittedArtifact, load_committed
from .backend import BlobBackend
from .claims import DEFAULT_LEASE_S
from .keys import SUCCESS, join, validate_name, validate_prefix
from .writer import ArtifactWriter


class ArtifactStore(Protocol):
    @property
    def root_uri(self) -> str: ...

    def begin(self, name: str, lease_s: float = DEFAULT_LEASE_S) -> ArtifactWriter: ...

    def open(self, uri_or_name: str) -> CommittedArtifact: ...

    def is_committed(self, uri_or_name: str) -> bool: ...

    def list_committed(self, prefix: str = "") -> list[str]: ...


class BlobStore:
    """Artifact semantics (commit protocol, committed-only reads) over a BlobBackend;
    FileStore and S3Store only choose the backend."""

    def __init__(self, backend: BlobBackend) -> None:
        self.backend = backend

    @property
    def root_uri(self) -> str:
        return self.backend.root_uri

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root_uri!r})"

    def _name_of(self, uri_or_name: str) -> str:
        """Accept either a name relative to this store or a full URI under its root."""
        if "://" not in uri_or_name:
            return validate_name(uri_or_name)
        root = self.root_uri + "/"
        if not uri_or_name.startswith(root):
            raise ValueError(f"{uri_or_name} is not inside this store ({self.root_uri})")
        return validate_name(uri_or_name[len(root):])

    def begin(self, name: str, lease_s: float = DEFAULT_LEASE_S) -> ArtifactWriter:
        """A writer for `name`; `lease_s` is how long its claim outlives its last sign of life."""
        return ArtifactWriter(self.backend, self._name_of(name), lease_s)

    def open(self, uri_or_name: str) -> CommittedArtifact:
        return load_committed(self.backend, self._name_of(uri_or_name))

    def is_committed(self, uri_or_name: str) -> bool:
        return self.backend.exists(join(self._name_of(uri_or_name), SUCCESS))

    def list_committed(self, prefix: str = "") -> list[str]:
        """Names (relative to the store) of committed artifacts whose name starts with prefix."""
        marker = "/" + SUCCESS
        return [key[: -len(marker)] for key in self.backend.list_prefix(validate_prefix(prefix)) if key.endswith(marker)]
