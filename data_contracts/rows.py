"""Turning Python row dicts into a table with a contract's exact schema."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from data_contracts.contract import Contract
from data_contracts.errors import ContractError

# What pa.array raises for a Python value that does not fit the type (an int beyond int64
# surfaces as Python's own OverflowError rather than an Arrow error).
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)


def table_from_rows(contract: Contract, rows: Iterable[Mapping[str, Any]], *, source: str) -> pa.Table:
    """Convert ``rows`` column by column, so a value that does not fit names its column and row.

    A missing key becomes null (and fails validation if the column is required); a key the
    contract does not know is an error, since it is most often a misspelt column name.
    """
    rows = list(rows)
    known = set(contract.schema.names)
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ContractError(
                f"expected a mapping of column to value, got {type(row).__name__}", file=source, row=index
            )
        unknown = sorted(set(row) - known)
        if unknown:
            raise ContractError(f"is not part of contract {contract.id}", file=source, column=unknown[0], row=index)
    columns = [_convert_column(field, [row.get(field.name) for row in rows], source) for field in contract.schema]
    return pa.Table.from_arrays(columns, schema=contract.schema)


def _convert_column(field: pa.Field, values: list[Any], source: str) -> pa.Array:
    try:
        array = pa.array(values, type=field.type)
    except _CONVERSION_ERRORS as error:
        row = _first_row(values, lambda value: _fails_conversion(value, field.type))
        raise ContractError(
            f"value does not fit {field.type}: {error}", file=source, column=field.name, row=row
        ) from None
    if _has_integers(field.type):
        row = _first_float_row(field.type, values)
        if row is not None:
            raise ContractError(
                f"value does not fit {field.type}: a float where an integer is required",
                file=source,
                column=field.name,
                row=row,
            )
    return array


def _fails_conversion(value: Any, type_: pa.DataType) -> bool:
    try:
        pa.array([value], type=type_)
    except _CONVERSION_ERRORS:
        return True
    return False


def _first_row(values: list[Any], is_bad: Callable[[Any], bool]) -> int | None:
    # Only called once a whole-column pass found a problem, so the per-row cost is paid on errors only.
    return next((index for index, value in enumerate(values) if is_bad(value)), None)


def _first_float_row(type_: pa.DataType, values: list[Any]) -> int | None:
    """Row of the first float in an integer column: pyarrow silently truncates those (1.5 -> 1),
    and type inference is the cheap way to see whether any float was there in the first place."""
    column_type = _inferred_type(values)
    if column_type is not None and not _float_where_integer(type_, column_type):
        return None
    # Either a float is there, or mixed Python types defeated column-wide inference: look row by row.
    return _first_row(values, lambda value: _float_where_integer(type_, _inferred_type([value])))


def _inferred_type(values: list[Any]) -> pa.DataType | None:
    try:
        return pa.array(values).type
    except _CONVERSION_ERRORS:
        return None


def _has_integers(type_: pa.DataType) -> bool:
    if pa.types.is_list(type_):
        return _has_integers(type_.value_type)
    return pa.types.is_integer(type_)


def _float_where_integer(expected: pa.DataType, inferred: pa.DataType | None) -> bool:
    if inferred is None:
        return False
    if pa.types.is_list(expected):
        return pa.types.is_list(inferred) and _float_where_integer(expected.value_type, inferred.value_type)
    return pa.types.is_integer(expected) and pa.types.is_floating(inferred)
