"""Matching a table's schema against a contract's, column by column."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.contract import Contract
from data_contracts.errors import ContractError


def require_matching_columns(contract: Contract, table: pa.Table, *, source: str) -> None:
    """ContractError for the first column whose name, position or type differs from the contract.

    Field nullability and list element names are not compared: Parquet readers rename list
    elements ("item" becomes "element") and in-memory tables are usually all-nullable, while
    whether nulls are actually present is checked value by value during validation.
    """
    expected = contract.schema
    actual = table.schema
    for position, field in enumerate(expected):
        if position >= len(actual):
            raise ContractError(f"is missing (expected at position {position})", file=source, column=field.name)
        found = actual.field(position)
        if found.name != field.name:
            raise ContractError(
                f"expected at position {position}, found column '{found.name}' there",
                file=source,
                column=field.name,
            )
        if not _same_type(found.type, field.type):
            raise ContractError(f"has type {found.type}, expected {field.type}", file=source, column=field.name)
    if len(actual) > len(expected):
        raise ContractError(
            f"is not part of contract {contract.id}", file=source, column=actual.field(len(expected)).name
        )


def with_contract_schema(contract: Contract, table: pa.Table) -> pa.Table:
    """``table`` relabelled with the contract's exact schema.

    Only valid once the table has passed validation: Arrow refuses to cast a null into a
    non-nullable field, which is exactly what validation rules out.
    """
    columns = [column.cast(field.type) for column, field in zip(table.columns, contract.schema, strict=True)]
    return pa.Table.from_arrays(columns, schema=contract.schema)


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_list(expected):
        return pa.types.is_list(actual) and _same_type(actual.value_type, expected.value_type)
    if pa.types.is_struct(expected):
        return (
            pa.types.is_struct(actual)
            and [child.name for child in actual] == [child.name for child in expected]
            and all(_same_type(a.type, e.type) for a, e in zip(actual, expected, strict=True))
        )
    return actual == expected
