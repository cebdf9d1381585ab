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

from data_contracts import ContractError, validate_table, write_parquet
from data_contracts.importers import IMPORTERS, RowProblem
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from data_contracts.rows import table_from_rows
from infra.publish import content_digest, publish_directory
from infra.store import ArtifactStore, CommittedArtifact, sha256_file


class ImportFailed(ValueError):
    pass


@dataclass
class Imported:
    dataset: CommittedArtifact
    rows: dict[str, int]
    rejected: int = 0
    rejects_file: Path | None = None
    problems: list[str] = field(default_factory=list)


def read_records(path: Path) -> Iterator[tuple[str, object]]:
    """(where, record) for every record: JSONL line by line (so a bad line is named), Parquet and a
    `save_to_disk` folder through the `datasets` library."""
    if path.is_dir():
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            for split, part in loaded.items():
                yield from ((f"{path} split {split} row {i}", record) for i, record in enumerate(part))
            return
        yield from ((f"{path} row {i}", record) for i, record in enumerate(loaded))
        return
    if path.suffix == ".parquet":
        import datasets

        for i, record in enumerate(datasets.Dataset.from_parquet(str(path))):
            yield f"{path} row {i}", record
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path} line {number}"
            if not raw.strip():
                continue
            try:
                yield where, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                yield where, RowProblem("line", f"is not UTF-8 (byte {error.start})")
            except json.JSONDecodeError as error:
                yield where, RowProblem("line", f"is not JSON ({error.msg} at column {error.colno})")


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
    return _publish(store, path, kind, label, contract, rows, test_fraction, seed, triggered_by, problems, rejects)


def dataset_label(path: Path, name: str | None) -> str:
    return safe_label(name or (path.stem if path.is_file() else path.name))


def safe_label(text: str) -> str:
    """`text` as a dataset's name in the store: what a store key and `NAME:latest` can carry."""
    return re.sub(r"[^A-Za-z0-9._=+@-]", "-", text)


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


def _publish(store, path, kind, label, contract, rows, test_fraction, seed, triggered_by, problems, rejects) -> Imported:
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
    source_sha256 = sha256_file(path) if path.is_file() else content_digest(path)
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
