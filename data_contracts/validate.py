"""Full validation of an in-memory table against a contract."""

from __future__ import annotations

import pyarrow as pa

from data_contracts.conform import require_matching_columns, with_contract_schema
from data_contracts.contract import Contract
from data_contracts.errors import ContractError
from data_contracts.structure import structural_checks

DEFAULT_MAX_TOKENS = 32768


def validate_table(
    contract: Contract, table: pa.Table, *, source: str, max_tokens: int = DEFAULT_MAX_TOKENS
) -> pa.Table:
    """Raise ContractError for the first problem in ``table``; return it with the contract's exact schema.

    "First" means the first failing check, at its first failing row. Checks run in a fixed
    order: schema, then per column in schema order (nulls, non-finite floats, token list
    lengths), then the contract's semantic checks. ``source`` names the table in errors.
    """
    require_matching_columns(contract, table, source=source)
    require_valid_utf8(table, source=source)
    # Record batches, unlike columns, share chunk boundaries across columns, which the
    # cross-column checks (e.g. loss_mask as long as response_ids) rely on.
    batches = table.to_batches()
    for check in (*structural_checks(contract, max_tokens), *contract.checks):
        offset = 0
        for batch in batches:
            problem = check(batch)
            if problem is not None:
                raise ContractError(problem.detail, file=source, column=problem.column, row=offset + problem.row)
            offset += batch.num_rows
    return with_contract_schema(contract, table)


def require_valid_utf8(table: pa.Table, *, source: str) -> None:
    """Every text value is valid UTF-8 (Arrow does not check bytes handed to it as strings); the first
    bad one is named by column and row, so it fails here and not as a bare UnicodeDecodeError later."""
    for name in table.column_names:
        column = table.column(name)
        try:
            column.validate(full=True)
        except pa.ArrowInvalid as error:
            raise ContractError(f"invalid data ({error})", file=source, column=name, row=_first_undecodable(column)) from None


def _first_undecodable(column: pa.ChunkedArray) -> int | None:
    for row in range(len(column)):
        try:
            column[row].as_py()
        except (UnicodeDecodeError, pa.ArrowInvalid):
            return row
    return None
