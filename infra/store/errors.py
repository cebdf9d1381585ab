"""Exceptions raised by the artifact store."""


class ArtifactStoreError(Exception):
    """Base class for every artifact-store failure."""


class ArtifactExistsError(ArtifactStoreError):
    """A committed artifact already holds this name with different content.

    Artifacts are immutable: once ``_SUCCESS`` exists, the name is taken for good.
    """


class ArtifactNotCommittedError(ArtifactStoreError):
    """The artifact has no ``_SUCCESS`` marker: it is missing or a partial upload."""


class IntegrityError(ArtifactStoreError):
    """Stored bytes do not match the sha256 or size they were recorded with."""


class BlobNotFoundError(ArtifactStoreError):
    """A backend key does not exist; backends translate their own not-found errors to this."""
