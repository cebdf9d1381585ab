"""Reading a committed artifact: every byte handed out is checked against the manifest."""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .backend import BlobBackend
from .errors import ArtifactNotCommittedError, BlobNotFoundError, IntegrityError
from .hashing import sha256_bytes
from .keys import CLAIMS, CONTROL_FILES, LINEAGE, MANIFEST, SUCCESS, join
from .records import FileEntry, Manifest, SuccessMarker


class CommittedArtifact:
    def __init__(self, backend: BlobBackend, name: str, marker: SuccessMarker, manifest: Manifest) -> None:
        self._backend = backend
        self.name = name
        self._marker = marker
        self.manifest = manifest

    @property
    def uri(self) -> str:
        return f"{self._backend.root_uri}/{self.name}"

    @property
    def digest(self) -> str:
        """sha256 of manifest.json: the content identity of the artifact."""
        return self._marker.manifest_sha256

    def __repr__(self) -> str:
        return f"CommittedArtifact({self.uri!r}, digest={self.digest[:12]})"

    def _key(self, relpath: str) -> str:
        return join(self.name, relpath)

    def lineage(self) -> dict[str, Any]:
        data = self._backend.get_bytes(self._key(LINEAGE))
        if sha256_bytes(data) != self._marker.lineage_sha256:
            raise IntegrityError(f"{self.uri}/{LINEAGE} does not match the sha256 recorded in {SUCCESS}")
        return json.loads(data)

    def read_bytes(self, relpath: str) -> bytes:
        entry = self._entry(relpath)
        data = self._backend.get_bytes(self._key(relpath))
        if sha256_bytes(data) != entry.sha256:
            raise IntegrityError(f"{self.uri}/{relpath} does not match its manifest sha256")
        return data

    def _entry(self, relpath: str) -> FileEntry:
        try:
            return self.manifest.files[relpath]
        except KeyError:
            raise KeyError(f"{relpath!r} is not a file of {self.uri}") from None

    def download(self, local_dir: str | Path, skip: tuple[str, ...] = ()) -> Path:
        """Copy every file under local_dir (but those whose path starts with one of `skip`); a file is
        only renamed into place once its sha256 matched, so a failed download never leaves a
        plausible-looking file."""
        local_dir = Path(local_dir)
        for relpath, entry in self.manifest.files.items():
            if relpath.startswith(skip):
                continue
            target = local_dir.joinpath(*relpath.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            try:
                if self._backend.download_file(self._key(relpath), partial) != entry.sha256:
                    raise IntegrityError(f"{self.uri}/{relpath} does not match its manifest sha256")
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        return local_dir

    def verify(self) -> list[str]:
        """Re-hash everything stored; one human-readable line per problem, [] when intact."""
        problems = self._verify_control_files()
        with tempfile.TemporaryDirectory(prefix="posttrain-verify-") as scratch:
            scratch_file = Path(scratch) / "blob"
            for relpath, entry in self.manifest.files.items():
                try:
                    actual = self._backend.download_file(self._key(relpath), scratch_file)
                except BlobNotFoundError:
                    problems.append(f"{relpath}: missing")
                    continue
                size = scratch_file.stat().st_size
                if (actual, size) != (entry.sha256, entry.size):
                    problems.append(
                        f"{relpath}: sha256 {actual} size {size}, manifest says sha256 {entry.sha256} size {entry.size}"
                    )
        expected = {self._key(path) for path in [*self.manifest.files, *CONTROL_FILES]}
        # A writer killed between _SUCCESS and releasing its claim leaves the claim; not content.
        claims = self._key(CLAIMS) + "/"
        for key in self._backend.list_prefix(self.name + "/"):
            if key not in expected and not key.startswith(claims):
                problems.append(f"{key[len(self.name) + 1:]}: unexpected file, not in manifest")
        return problems

    def _verify_control_files(self) -> list[str]:
        problems = []
        for relpath, recorded in ((MANIFEST, self._marker.manifest_sha256), (LINEAGE, self._marker.lineage_sha256)):
            try:
                actual = sha256_bytes(self._backend.get_bytes(self._key(relpath)))
            except BlobNotFoundError:
                problems.append(f"{relpath}: missing")
                continue
            if actual != recorded:
                problems.append(f"{relpath}: sha256 {actual}, {SUCCESS} says {recorded}")
        return problems


def load_committed(backend: BlobBackend, name: str) -> CommittedArtifact:
    """Open ``name``; only ``_SUCCESS`` makes an artifact visible, so its absence is
    reported as "not committed" whether nothing or a partial upload is there."""
    uri = f"{backend.root_uri}/{name}"
    try:
        marker = SuccessMarker.from_bytes(backend.get_bytes(join(name, SUCCESS)))
    except BlobNotFoundError:
        raise ArtifactNotCommittedError(
            f"{uri} is not a committed artifact (no {SUCCESS} marker: missing, or an interrupted upload)"
        ) from None
    manifest_bytes = backend.get_bytes(join(name, MANIFEST))
    if sha256_bytes(manifest_bytes) != marker.manifest_sha256:
        raise IntegrityError(f"{uri}/{MANIFEST} does not match the sha256 recorded in {SUCCESS}")
    return CommittedArtifact(backend, name, marker, Manifest.from_bytes(manifest_bytes))
