"""Arrays that remember which batch row each element came from.

Validation descends into list and struct columns to check every nested value in one
vectorized pass, but an error must still name the table row. Mapping an element back
to its row costs a pass over the parent offsets, so it is done lazily: only for the one
element that is actually reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Located:
    array: pa.Array
    row_of: Callable[[int], int]  # element index in ``array`` -> row index in the batch

    @classmethod
    def column(cls, batch: pa.RecordBatch, name: str) -> Located:
        return cls(batch.column(name), lambda index: index)

    @classmethod
    def path(cls, batch: pa.RecordBatch, dotted_path: str) -> Located:
        """The field at ``dotted_path`` (``"messages.tool_calls.name"``), lists in between flattened."""
        top, *nested = dotted_path.split(".")
        located = cls.column(batch, top)
        for name in nested:
            while pa.types.is_list(located.array.type):
                located = located.list_values()
            located = located.struct_field(name)
        return located

    def first_row(self, mask: pa.Array) -> int | None:
        """Batch row of the first element where ``mask`` is true (nulls in ``mask`` count as false)."""
        index = self.first_index(mask)
        return None if index is None else self.row_of(index)

    @staticmethod
    def first_index(mask: pa.Array) -> int | None:
        index = pc.index(mask, True).as_py()
        return None if index < 0 else index

    def list_values(self) -> Located:
        lists = self.without_nulls()
        return Located(
            pc.list_flatten(lists.array),
            lambda index: lists.row_of(pc.list_parent_indices(lists.array)[index].as_py()),
        )

    def struct_field(self, name: str) -> Located:
        # A struct's child arrays ignore the struct's own validity; dropping null structs
        # first keeps garbage under them from being validated.
        structs = self.without_nulls()
        return Located(structs.array.field(name), structs.row_of)

    def leaves(self) -> Located:
        """The scalar values, with every level of list flattened away."""
        located = self
        while pa.types.is_list(located.array.type):
            located = located.list_values()
        return located

    def without_nulls(self) -> Located:
        """The same elements minus the null ones, still traced to their batch rows."""
        # Null entries are either allowed or already reported by the null check, so they are
        # dropped before descending. For lists this also matters for correctness: a null list
        # may be backed by a non-empty slice of values, which list_flatten skips but
        # list_parent_indices counts, so the two only agree on arrays without nulls.
        if self.array.null_count == 0:
            return self
        kept = pc.indices_nonzero(self.array.is_valid())
        return Located(self.array.take(kept), lambda index: self.row_of(kept[index].as_py()))
