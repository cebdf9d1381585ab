"""Reusable semantic checks that contracts compose.

A check looks at one record batch and returns the first ``Problem`` it finds, or ``None``.
Checks address fields by dotted path (``"messages.role"``); the path is also the column
the resulting ``ContractError`` names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from data_contracts.located import Located


@dataclass(frozen=True)
class Problem:
    column: str
    row: int  # within the batch; validation adds the batch's offset in the table
    detail: str


Check = Callable[[pa.RecordBatch], "Problem | None"]


def one_of(path: str, allowed: Sequence[str | int]) -> Check:
    """Every (non-null) value at ``path``, inside lists too, is one of ``allowed``."""

    def check(batch: pa.RecordBatch) -> Problem | None:
        values = Located.path(batch, path).leaves()
        allowed_array = pa.array(allowed, type=values.array.type)
        outside = pc.and_(values.array.is_valid(), pc.invert(pc.is_in(values.array, value_set=allowed_array)))
        index = values.first_index(outside)
        if index is None:
            return None
        listed = ", ".join(str(value) for value in allowed)
        return Problem(path, values.row_of(index), f"{values.array[index].as_py()!r} is not one of {listed}")

    return check


def _bounded(path: str, outside_bound, relation: str, bound: float) -> Check:
    def check(batch: pa.RecordBatch) -> Problem | None:
        values = Located.path(batch, path).leaves()
        index = values.first_index(outside_bound(values.array, bound))
        if index is None:
            return None
        return Problem(path, values.row_of(index), f"{values.array[index].as_py()} is {relation} {bound}")

    return check


def at_most(path: str, bound: float) -> Check:
    """Every value at ``path``, inside lists too, is <= ``bound``."""
    return _bounded(path, pc.greater, "greater than", bound)


def at_least(path: str, bound: float) -> Check:
    """Every value at ``path``, inside lists too, is >= ``bound``."""
    return _bounded(path, pc.less, "less than", bound)


def non_empty(path: str) -> Check:
    """The list at ``path`` has at least one element (a null list is left to the null check)."""

    def check(batch: pa.RecordBatch) -> Problem | None:
        lists = Located.path(batch, path)
        row = lists.first_row(pc.equal(pc.list_value_length(lists.array), 0))
        return None if row is None else Problem(path, row, "list is empty")

    return check


def same_length(path: str, reference: str) -> Check:
    """The top-level list column ``path`` has as many elements as ``reference`` in every row."""

    def check(batch: pa.RecordBatch) -> Problem | None:
        lengths = pc.list_value_length(batch.column(path))
        reference_lengths = pc.list_value_length(batch.column(reference))
        row = Located.first_index(pc.not_equal(lengths, reference_lengths))
        if row is None:
            return None
        return Problem(
            path,
            row,
            f"has {lengths[row].as_py()} elements but {reference} has {reference_lengths[row].as_py()}",
        )

    return check


def non_decreasing(path: str) -> Check:
    """Within each row, the list at top-level column ``path`` never decreases."""

    def check(batch: pa.RecordBatch) -> Problem | None:
        lists = Located.column(batch, path).without_nulls()
        values = lists.list_values()
        if len(values.array) < 2:
            return None
        # A drop between the last value of one row and the first of the next is not a decrease.
        parents = pc.list_parent_indices(lists.array)
        drops = pc.and_(
            pc.less(values.array[1:], values.array[:-1]),
            pc.equal(parents[1:], parents[:-1]),
        )
        index = Located.first_index(drops)
        if index is None:
            return None
        previous, current = values.array[index].as_py(), values.array[index + 1].as_py()
        return Problem(path, values.row_of(index + 1), f"decreases from {previous} to {current}")

    return check


def json_object(path: str) -> Check:
    """Every non-null string at ``path`` parses as a JSON object."""
    return _json_shaped(path, lambda parsed: isinstance(parsed, dict), "a JSON object")


def json_list_of_objects(path: str) -> Check:
    """Every non-null string at ``path`` parses as a JSON array whose items are all objects."""
    return _json_shaped(
        path,
        lambda parsed: isinstance(parsed, list) and all(isinstance(item, dict) for item in parsed),
        "a JSON array of objects",
    )


def _json_shaped(path: str, accepts: Callable[[object], bool], expected: str) -> Check:
    # JSON has no vectorized parser in Arrow, so this is the one check that loops in Python.
    def check(batch: pa.RecordBatch) -> Problem | None:
        values = Located.path(batch, path).leaves()
        for index, text in enumerate(values.array.to_pylist()):
            if text is None:
                continue
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as error:
                return Problem(path, values.row_of(index), f"is not valid JSON ({error.msg}): {text[:80]!r}")
            if not accepts(parsed):
                return Problem(path, values.row_of(index), f"is not {expected}: {text[:80]!r}")
        return None

    return check
