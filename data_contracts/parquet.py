"""Validated, atomic Parquet reads and writes of contract tables."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data_contracts.contract import Contract
from data_contracts.errors import ContractError
from data_contracts.rows import table_from_rows
from data_contracts.validate import DEFAULT_MAX_TOKENS, validate_table

# Parquet key-value metadata naming the contract a file was written under, so that files of
# two contracts with the same columns (chat@1 vs a future chat@2) cannot be mixed up.
CONTRACT_METADATA_KEY = b"posttrain.contract"


def write_parquet(
    contract: Contract,
    rows_or_table: pa.Table | Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> int:
    """Validate, then atomically write ``rows_or_table`` to ``path``; return the number of rows.

    Nothing is written unless the whole table is valid, and a reader never sees a partial
    file: the data goes to a temporary file beside ``path`` that replaces it only once complete.
    """
    source = os.fspath(path)
    if isinstance(rows_or_table, pa.Table):
        table = rows_or_table
    else:
        table = table_from_rows(contract, rows_or_table, source=source)
    table = validate_table(contract, table, source=source, max_tokens=max_tokens)
    table = table.replace_schema_metadata({CONTRACT_METADATA_KEY: contract.id.encode()})
    _write_atomically(table, Path(path), dictionary_columns=_dictionary_columns(contract))
    return table.num_rows


def read_parquet(
    contract: Contract, path: str | os.PathLike[str], *, max_tokens: int = DEFAULT_MAX_TOKENS,
    source: str | None = None,
) -> pa.Table:
    """Read ``path`` and validate it against ``contract`` exactly as a write would.

    A file stamped with another contract is refused; one without a stamp (written by another
    tool) is accepted if its schema and values pass. Errors name ``source`` (e.g. the dataset's URI
    and file), default the path.
    """
    source = source or os.fspath(path)
    try:
        stamp = (pq.read_schema(path).metadata or {}).get(CONTRACT_METADATA_KEY)
        if stamp is not None and stamp.decode() != contract.id:
            raise ContractError(f"file was written as {stamp.decode()}, not {contract.id}", file=source)
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:  # a corrupt page surfaces as OSError ("Couldn't deserialize thrift")
        raise ContractError(f"not a readable Parquet file: {error}", file=source) from None
    return validate_table(contract, table, source=source, max_tokens=max_tokens)


def _write_atomically(table: pa.Table, path: Path, *, dictionary_columns: list[str]) -> None:
    # A unique name in the target directory: os.replace is only atomic within one filesystem,
    # and concurrent writers to the same target must not share a temporary file.
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "xb") as file:
            pq.write_table(
                table,
                file,
                compression="snappy",
                use_dictionary=dictionary_columns,
                # Pins the "list.element" leaf naming that _dictionary_columns relies on.
                use_compliant_nested_type=True,
            )
            # Without this a crash soon after the rename can leave an empty file at ``path``.
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _dictionary_columns(contract: Contract) -> list[str]:
    """Parquet leaf paths to dictionary-encode: every leaf outside the token columns.

    Parquet applies the setting per leaf, so naming the top-level "messages" column would not
    reach "messages.list.element.role".
    """
    return [
        leaf
        for field in contract.schema
        if field.name not in contract.token_columns
        for leaf in _leaf_paths(field.type, field.name)
    ]


def _leaf_paths(type_: pa.DataType, prefix: str) -> list[str]:
    if pa.types.is_list(type_):
        return _leaf_paths(type_.value_type, f"{prefix}.list.element")
    if pa.types.is_struct(type_):
        return [leaf for child in type_ for leaf in _leaf_paths(child.type, f"{prefix}.{child.name}")]
    return [prefix]
