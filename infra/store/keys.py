"""Artifact names, file paths inside artifacts, and the reserved control files.

Names end up in URIs and S3 keys, so they are restricted to characters that need no
escaping; that keeps "the URI we printed" and "the URI you pass back" byte-identical.
"""

import re

MANIFEST = "manifest.json"
LINEAGE = "lineage.json"
SUCCESS = "_SUCCESS"
# Writers' claims on a name while they commit it (see claims.py); never part of the content.
CLAIMS = "_CLAIM"
CONTROL_FILES = frozenset({MANIFEST, LINEAGE, SUCCESS})

_NAME_SEGMENT = re.compile(r"[A-Za-z0-9._=+@-]+")
MAX_SEGMENT_BYTES = 255  # a file name's limit on every common file system


def _segments(path: str, what: str) -> list[str]:
    if not path or path.startswith("/") or path.endswith("/"):
        raise ValueError(f"{what} {path!r} must be a non-empty relative path without leading/trailing '/'")
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise ValueError(f"{what} {path!r} must not contain empty, '.' or '..' segments")
    if any(len(segment.encode()) > MAX_SEGMENT_BYTES for segment in segments):
        raise ValueError(f"{what} {path[:40]!r}...: a segment is longer than {MAX_SEGMENT_BYTES} bytes, "
                         "which no file system stores")
    return segments


def validate_name(name: str) -> str:
    """Check an artifact name such as ``checkpoints/sft/run-1``."""
    for segment in _segments(name, "artifact name"):
        if not _NAME_SEGMENT.fullmatch(segment) or segment in (SUCCESS, CLAIMS):
            # ascii(): a look-alike letter (Cyrillic а for Latin a) shows as what it is
            raise ValueError(f"artifact name {ascii(name)}: segment {ascii(segment)} is not allowed (ASCII letters, "
                             "digits and . _ = + @ -)")
        if segment.startswith("."):  # a hidden folder, and the shape of the file backend's temporary files
            raise ValueError(f"artifact name {name!r}: segment {segment!r} starts with '.'")
    return name


def validate_relpath(relpath: str) -> str:
    """Check a file path inside an artifact.

    A file named ``_SUCCESS`` at any depth would make its directory look like a
    committed artifact to ``list_committed``, so it is refused everywhere.
    """
    segments = _segments(relpath, "file path")
    if "\\" in relpath or any(ord(char) < 32 for char in relpath):
        raise ValueError(f"file path {relpath!r} contains a backslash or control character")
    if segments[-1] == SUCCESS or segments[0] == CLAIMS or relpath in CONTROL_FILES:
        raise ValueError(f"file path {relpath!r} is reserved for the commit protocol")
    return relpath


def validate_prefix(prefix: str) -> str:
    """A listing prefix may be partial ("runs/sft-") but must stay inside the store."""
    if prefix.startswith("/") or ".." in prefix.split("/"):
        raise ValueError(f"listing prefix {prefix!r} must be relative and free of '..'")
    return prefix


def join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def ancestors(name: str) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b"]``: the names that could enclose this one."""
    segments = name.split("/")
    return ["/".join(segments[:i]) for i in range(1, len(segments))]
