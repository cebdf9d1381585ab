"""The one exception every contract violation is reported as."""

from __future__ import annotations


class ContractError(ValueError):
    """A table or file does not satisfy its data contract.

    ``file`` is the Parquet path (or the caller-supplied source label), ``column`` the
    dotted path of the offending field (``"messages.role"``) and ``row`` the 0-based
    table row. ``column`` and ``row`` are ``None`` when the problem is not tied to one
    (a file stamped with another contract has no bad column; a type mismatch has no row).
    """

    def __init__(self, detail: str, *, file: str, column: str | None = None, row: int | None = None):
        self.detail = detail
        self.file = file
        self.column = column
        self.row = row
        where = []
        if column is not None:
            where.append(f"column '{column}'")
        if row is not None:
            where.append(f"row {row}")
        prefix = f"{file}: {', '.join(where)}" if where else file
        super().__init__(f"{prefix}: {detail}")
