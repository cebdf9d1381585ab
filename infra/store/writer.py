"""The commit protocol, written once for every backend.

    claim -> upload_files -> write_manifest -> write_lineage -> mark_success

Only the holder of the name's claim writes under it (claims.py), so two writers never mix
their files, and ``_SUCCESS`` is created exclusively, so there is never a second one. A writer
that finds the name claimed waits for the holder: when the holder commits the same content it
returns that artifact, different content is an ArtifactExistsError; when the holder dies it
takes over. ``_SUCCESS`` is written last and readers ignore anything without it, so a crash at
any step leaves an invisible partial upload that the next commit simply replaces. The steps
are public so tests (and operators) can stop between any two of them.
"""

from pathlib import Path
from typing import Any

from .artifact import CommittedArtifact, load_committed
from .backend import BlobBackend
from .claims import DEFAULT_LEASE_S, HeldClaim, acquire
from .errors import ArtifactExistsError, ArtifactStoreError
from .hashing import sha256_bytes, sha256_file
from .keys import CLAIMS, LINEAGE, MANIFEST, SUCCESS, ancestors, join, validate_name, validate_relpath
from .records import FileEntry, Manifest, SuccessMarker, encode_lineage

_STEPS = ("claim", "upload_files", "write_manifest", "write_lineage", "mark_success")


class ArtifactWriter:
    def __init__(self, backend: BlobBackend, name: str, lease_s: float = DEFAULT_LEASE_S) -> None:
        self._backend = backend
        self.name = validate_name(name)
        self._lease_s = lease_s
        self._claim: HeldClaim | None = None
        self._staged: dict[str, Path | bytes] = {}
        self._manifest: Manifest | None = None
        self._lineage_sha256: str | None = None
        self._done = 0

    @property
    def uri(self) -> str:
        return f"{self._backend.root_uri}/{self.name}"

    def _key(self, relpath: str) -> str:
        return join(self.name, relpath)

    # -- staging --------------------------------------------------------------

    def _stage(self, relpath: str, source: Path | bytes) -> None:
        if self._manifest is not None:
            raise ArtifactStoreError(f"{self.uri}: files cannot be added once the commit has started")
        if validate_relpath(relpath) in self._staged:
            raise ValueError(f"{self.uri}: {relpath!r} was already added")
        self._staged[relpath] = source

    def put_file(self, relpath: str, local_path: str | Path) -> None:
        local_path = Path(local_path)
        if not local_path.is_file():
            raise FileNotFoundError(f"{local_path} is not a file")
        self._stage(relpath, local_path)

    def put_bytes(self, relpath: str, data: bytes) -> None:
        self._stage(relpath, bytes(data))

    def put_dir(self, local_dir: str | Path, prefix: str = "") -> None:
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise NotADirectoryError(f"{local_dir} is not a directory")
        for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
            self.put_file(join(prefix, path.relative_to(local_dir).as_posix()), path)

    def manifest(self) -> Manifest:
        """Hash the staged content (once); staging is frozen from here on."""
        if self._manifest is None:
            files = {}
            for relpath, source in sorted(self._staged.items()):
                if isinstance(source, bytes):
                    files[relpath] = FileEntry(sha256_bytes(source), len(source))
                else:
                    files[relpath] = FileEntry(sha256_file(source), source.stat().st_size)
            self._manifest = Manifest(files)
        return self._manifest

    # -- commit ---------------------------------------------------------------

    def commit(self, lineage: bytes | dict[str, Any]) -> CommittedArtifact:
        """Run all five steps. If the name is (or gets, while we wait for another writer)
        committed with the same digest, return that artifact (its lineage is kept); a
        different digest raises ArtifactExistsError."""
        lineage_bytes = encode_lineage(lineage)
        committed = self.claim()
        if committed is not None:
            return committed
        try:
            self.upload_files()
            self.write_manifest()
            self.write_lineage(lineage_bytes)
            return self.mark_success()
        except BaseException:
            self._release()
            raise

    def _committed_as_ours(self) -> CommittedArtifact:
        existing = load_committed(self._backend, self.name)
        if existing.digest != self.manifest().digest:
            raise self._exists_error(existing.digest)
        return existing

    def _exists_error(self, existing_digest: str) -> ArtifactExistsError:
        return ArtifactExistsError(
            f"{self.uri} is already committed with digest {existing_digest}; artifacts are immutable, "
            f"so content with digest {self.manifest().digest} needs a new name"
        )

    def _expect(self, step: str) -> None:
        # A step only counts once it succeeded, so a failed step can simply be called again.
        expected = _STEPS[self._done] if self._done < len(_STEPS) else "nothing (already committed)"
        if step != expected:
            raise ArtifactStoreError(f"{self.uri}: commit step {step} called, expected {expected}")

    def claim(self) -> CommittedArtifact | None:
        """Hold the name, waiting while another live writer holds it. None when we hold it;
        the committed artifact when the name got committed with our digest meanwhile."""
        self._expect("claim")
        self._claim = acquire(self._backend, self.name, self.manifest().digest, self._lease_s)
        if self._claim is None:
            return self._committed_as_ours()
        if self._backend.exists(self._key(SUCCESS)):  # committed between the wait and our claim
            self._release()
            return self._committed_as_ours()
        self._done += 1
        return None

    def _release(self) -> None:
        if self._claim is not None:
            self._claim.release()
            self._claim = None

    def _check_still_held(self, step: str) -> None:
        assert self._claim is not None  # guaranteed by the step order
        if not self._claim.still_held():
            raise ArtifactStoreError(
                f"{self.uri}: our claim lapsed before {step} (this writer was silent longer than the "
                f"{self._lease_s:.0f}s lease) and another writer took the name over"
            )

    def upload_files(self) -> None:
        self._expect("upload_files")
        self._check_still_held("upload_files")
        present = [key for key in self._backend.list_prefix(self.name + "/")
                   if not key.startswith(join(self.name, CLAIMS) + "/")]
        self._check_not_nested(present)
        manifest = self.manifest()
        # Leftovers of an interrupted attempt (whose writer is gone: we hold the claim) would
        # show up as unexpected files.
        for key in present:
            if key[len(self.name) + 1:] not in manifest.files:
                self._backend.delete(key)
        for relpath, source in self._staged.items():
            entry = manifest.files[relpath]
            if isinstance(source, bytes):
                self._backend.put_bytes(self._key(relpath), source)
            else:
                self._backend.put_file(self._key(relpath), source, entry.sha256, entry.size)
        self._done += 1

    def _check_not_nested(self, present: list[str]) -> None:
        """Artifacts must not nest: clearing leftovers under this name would otherwise
        delete a committed artifact inside it, and an enclosing artifact would list
        our files as unexpected."""
        for outer in ancestors(self.name):
            if self._backend.exists(join(outer, SUCCESS)):
                raise ArtifactStoreError(f"{self.uri} would nest inside committed artifact {outer}")
        for key in present:
            if key.endswith("/" + SUCCESS):
                raise ArtifactStoreError(f"{self.uri} would enclose committed artifact {key[: -len(SUCCESS) - 1]}")

    def write_manifest(self) -> None:
        self._expect("write_manifest")
        self._backend.put_bytes(self._key(MANIFEST), self.manifest().to_bytes())
        self._done += 1

    def write_lineage(self, lineage: bytes | dict[str, Any]) -> None:
        self._expect("write_lineage")
        data = encode_lineage(lineage)
        self._backend.put_bytes(self._key(LINEAGE), data)
        self._lineage_sha256 = sha256_bytes(data)
        self._done += 1

    def mark_success(self) -> CommittedArtifact:
        self._expect("mark_success")
        assert self._lineage_sha256 is not None  # guaranteed by the step order
        self._check_still_held("mark_success")
        marker = SuccessMarker(self.manifest().digest, self._lineage_sha256)
        created = self._backend.create_exclusive(self._key(SUCCESS), marker.to_bytes())
        self._release()
        self._done += 1
        if not created:  # only if our claim lapsed between the check and the create
            return self._committed_as_ours()
        return CommittedArtifact(self._backend, self.name, marker, self.manifest())
