"""Checks every contract gets from its schema alone: required values present, floats
finite, token lists within bounds. pyarrow enforces none of these on its own."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from data_contracts.checks import Check, Problem
from data_contracts.contract import Contract
from data_contracts.located import Located


def structural_checks(contract: Contract, max_tokens: int) -> list[Check]:
    """One check per column in schema order, plus a length check right after each token column."""
    checks: list[Check] = []
    for field in contract.schema:
        checks.append(_field_check(field))
        if field.name in contract.token_columns:
            checks.append(_token_length_check(field.name, max_tokens))
    return checks


def _field_check(field: pa.Field) -> Check:
    def check(batch: pa.RecordBatch) -> Problem | None:
        return _first_problem(Located.column(batch, field.name), field, field.name, "is null but required")

    return check


def _first_problem(values: Located, field: pa.Field, path: str, null_detail: str) -> Problem | None:
    """Walk ``field`` depth-first, checking nullability and finiteness at every level."""
    array = values.array
    if not field.nullable and array.null_count:
        return Problem(path, values.first_row(array.is_null()), null_detail)
    type_ = field.type
    if pa.types.is_floating(type_):
        index = values.first_index(pc.invert(pc.is_finite(array)))
        if index is not None:
            return Problem(path, values.row_of(index), f"non-finite value {array[index].as_py()}")
    elif pa.types.is_list(type_):
        # List elements share the column's path: "prompt_ids", not "prompt_ids.item".
        return _first_problem(values.list_values(), type_.value_field, path, "contains a null element")
    elif pa.types.is_struct(type_):
        for child in type_:
            problem = _first_problem(
                values.struct_field(child.name), child, f"{path}.{child.name}", "is null but required"
            )
            if problem is not None:
                return problem
    return None


def _token_length_check(column: str, max_tokens: int) -> Check:
    def check(batch: pa.RecordBatch) -> Problem | None:
        lengths = pc.list_value_length(batch.column(column))
        row = Located.first_index(pc.or_(pc.equal(lengths, 0), pc.greater(lengths, max_tokens)))
        if row is None:
            return None
        length = lengths[row].as_py()
        if length == 0:
            return Problem(column, row, "token list is empty")
        return Problem(column, row, f"token list has {length} tokens, more than max_tokens={max_tokens}")

    return check
