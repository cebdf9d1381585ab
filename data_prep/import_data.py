"""`posttrain data import`: a person's JSONL, Parquet or Hugging Face `datasets` folder, as a committed
chat@1, prompt@1 or preference@1 dataset with deterministic train/test splits.

A bad row stops the import naming the file, the line (JSONL) or row, and the field, and nothing is
committed; with `skip_bad_rows` the good rows are committed and the rejects written, with their
reasons, to a JSONL file next to the source. The lineage records the source file's sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from data_contracts import ContractError, validate_table, write_parquet
from data_contracts.importers import IMPORTERS, MAX_RECORD_BYTES, RowProblem, parse_json
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from data_contracts.regular_files import open_regular_file
from data_contracts.rows import table_from_rows
from infra.publish import content_digest, publish_directory
from infra.store import ArtifactStore, CommittedArtifact, sha256_file


class ImportFailed(ValueError):
    pass


# What a dataset's name may be: every such name is a store key segment (infra.store.keys) and reads back the same in
# `NAME:latest`; none is hidden (a leading dot) or a path step (`..`).
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = "ASCII letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100 characters"


@dataclass
class Imported:
    dataset: CommittedArtifact
    rows: dict[str, int]
    rejected: int = 0
    rejects_file: Path | None = None
    problems: list[str] = field(default_factory=list)


def read_records(path: Path) -> Iterator[tuple[str, object]]:
    """(where, record) for every record: JSONL line by line (so a bad line is named), Parquet batch by batch, and a
    `save_to_disk` folder through the `datasets` library. A file is read only if it is a regular file (`/dev/zero`
    has no end, a FIFO would block the import), and through the descriptor that was checked."""
    if path.is_dir():
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            for split, part in loaded.items():
                yield from ((f"{path} split {split} row {i}", record) for i, record in enumerate(part))
            return
        yield from ((f"{path} row {i}", record) for i, record in enumerate(loaded))
        return
    try:
        handle = open_regular_file(path)
    except OSError as error:  # not a regular file, or one this user may not read
        raise ImportFailed(str(error)) from None
    with handle:
        yield from (_parquet_records(path, handle) if path.suffix == ".parquet" else _jsonl_records(path, handle))


def _parquet_records(path: Path, handle: BinaryIO) -> Iterator[tuple[str, object]]:
    # pyarrow reads the checked descriptor; `datasets.Dataset.from_parquet` would reopen the path and write an Arrow
    # copy of the file into its cache, outside the store.
    try:
        number = 0
        for batch in pq.ParquetFile(handle).iter_batches():
            for record in batch.to_pylist():
                yield f"{path} row {number}", record
                number += 1
    except pa.ArrowException as error:
        raise ImportFailed(f"{path}: not a Parquet file this can read ({error})") from None


def _jsonl_records(path: Path, handle: BinaryIO) -> Iterator[tuple[str, object]]:
    # No cap on the file's size: a regular file ends, it is read a line at a time, and a line past MAX_RECORD_BYTES
    # stops the read, so memory holds the good rows and never an unbounded line.
    number = 0
    while raw := handle.readline(MAX_RECORD_BYTES + 1):
        number += 1
        if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            # Not skipped as one bad row: finding its end could mean reading terabytes (a sparse file of zeros).
            raise ImportFailed(f"{path} line {number}: longer than {MAX_RECORD_BYTES:,} bytes, the most one record "
                               "takes; is this a JSONL file?")
        if raw.strip():
            yield f"{path} line {number}", _line_record(raw)


def _line_record(raw: bytes) -> object:
    """A JSONL line's record, or the RowProblem that says why it is none."""
    try:
        return parse_json(raw.decode("utf-8"), "line")
    except UnicodeDecodeError as error:
        return RowProblem("line", f"is not UTF-8 (byte {error.start})")
    except RowProblem as problem:
        return problem


def _split_of(row_id: str, seed: int, test_fraction: float) -> str:
    """The same id always lands in the same split, whatever else is in the file."""
    point = int.from_bytes(hashlib.sha256(f"{seed}:{row_id}".encode()).digest()[:8], "big") / 2**64
    return "test" if point < test_fraction else "train"


def import_dataset(store: ArtifactStore, path: Path, kind: str, *, name: str | None = None,
                   test_fraction: float = 0.1, skip_bad_rows: bool = False, seed: int = 0,
                   triggered_by: str = "posttrain data import") -> Imported:
    if kind not in IMPORTERS:
        raise ImportFailed(f"--as {kind!r}: one of {', '.join(IMPORTERS)}")
    if not 0 <= test_fraction < 1:
        raise ImportFailed(f"--test-fraction {test_fraction}: between 0 and 1 (exclusive)")
    if not path.exists():
        raise ImportFailed(f"{path}: no such file or folder")
    contract, label = IMPORTERS[kind][0], dataset_label(path, name)
    rows, problems, rejects = convert_records(path, kind, label)
    if problems and not skip_bad_rows:
        more = f" (and {len(problems) - 1} more bad rows; --skip-bad-rows commits the others)" if len(problems) > 1 else ""
        raise ImportFailed(problems[0] + more)
    if not rows:
        raise ImportFailed(f"{path}: no rows to import")
    return publish_rows(store, path, kind, label, contract, rows, test_fraction, seed, triggered_by, problems, rejects)


def dataset_label(path: Path, name: str | None) -> str:
    """The dataset's name in the store: `name` (--name, or a spec's `data.imports` key) as it is given, or without
    one a name made from the file's."""
    return safe_label(path.stem if path.is_file() else path.name) if name is None else check_dataset_name(name)


def check_dataset_name(name: str) -> str:
    """`name` if it keeps NAME_RULE; a name a person gave is refused, never rewritten into another they did not
    choose. ascii() shows a look-alike (a Cyrillic letter for a Latin one) or a control character as it is."""
    if not DATASET_NAME.fullmatch(name):
        shown = ascii(name) if len(name) <= 100 else f"{ascii(name[:100])}... ({len(name):,} characters)"
        raise ImportFailed(f"dataset name {shown}: not allowed; a name is {NAME_RULE}")
    return name


def safe_label(text: str) -> str:
    """`text` made into a name that keeps NAME_RULE: each run of other characters becomes one '-', and dots, dashes
    and underscores at either end go (`.hidden` gives `hidden`, never a hidden folder); refused if nothing is left."""
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("._-")[:100]
    if not label:
        raise ImportFailed(f"{ascii(text)} has no ASCII letter or digit to make a dataset name of; name the "
                           "dataset (--name)")
    return label


def convert_records(path: Path, kind: str, label: str) -> tuple[list[dict], list[str], list[dict]]:
    """(the rows that fit the contract, a problem per bad row naming where and which field, the rejects)."""
    contract, convert = IMPORTERS[kind]
    rows, problems, rejects = [], [], []
    for where, record in read_records(path):
        try:
            if isinstance(record, RowProblem):
                raise record
            if not isinstance(record, dict):
                raise RowProblem("record", f"must be a JSON object, got {type(record).__name__}")
            row = convert(record, label)
            validate_table(contract, table_from_rows(contract, [{**row, **_split_field(contract)}], source=where),
                           source=where)
        except (RowProblem, ContractError) as problem:
            problems.append(f"{where}: {problem}")
            rejects.append({"where": where, "problem": str(problem), "record": record if isinstance(record, dict) else None})
            continue
        rows.append(row)
    return rows, problems, rejects


def _split_field(contract) -> dict:
    return {"split": "train"} if "split" in contract.schema.names else {}


def publish_rows(store, path, kind, label, contract, rows, test_fraction, seed, triggered_by, problems,
                 rejects, source_sha256: str | None = None) -> Imported:
    """`rows` committed as the dataset `label` with seeded splits, and the rejects written beside `path` (also
    what the Harbor import, data_prep/harbor_import.py, commits its tasks' rows with, giving its own digest of the
    source folder)."""
    seen = set()
    for row in rows:
        if row["id"] in seen:
            raise ImportFailed(f"{path}: id {row['id']!r} appears twice; ids name rows in splits and lineage")
        seen.add(row["id"])
    splits: dict[str, list[dict]] = {"train": [], "test": []}
    for row in rows:
        split = _split_of(row["id"], seed, test_fraction)
        splits[split].append({**row, "split": split} if "split" in contract.schema.names else row)
    # The project's own digests: a file's sha256, or a folder's over each file's path and sha256.
    source_sha256 = source_sha256 or (sha256_file(path) if path.is_file() else content_digest(path))
    config = {"source": path.name, "source_sha256": source_sha256, "format": kind, "contract": contract.id,
              "test_fraction": test_fraction, "rejected": len(problems)}
    with tempfile.TemporaryDirectory(prefix="posttrain-import-") as tmp:
        local = Path(tmp) / "dataset"
        local.mkdir()
        counts = {split: write_parquet(contract, records, local / f"{split}.parquet") for split, records in splits.items()}
        lineage = Lineage(kind="dataset", name=label, config=config, config_sha256=config_digest(config), seed=seed,
                          code=current_code_version(), libraries=library_versions(), triggered_by=triggered_by)
        dataset = publish_directory(store, f"datasets/{label}-{content_digest(local)[:12]}", local, lineage)
    rejects_file = None
    if rejects:
        rejects_file = path.with_name(f"{path.name}.rejected.jsonl")
        write_replacing(rejects_file, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rejects))
    return Imported(dataset, counts, len(problems), rejects_file, problems)


def write_replacing(target: Path, text: str) -> None:
    """`text` as the file `target`, written to a new file beside it and renamed over the name: whatever was
    there (an earlier rejects file, or a symlink planted at that name) is replaced, never written through."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.",
                                     delete=False) as new:
        try:
            new.write(text)
        except BaseException:
            os.unlink(new.name)  # nothing half-written left beside the source
            raise
    os.replace(new.name, target)
