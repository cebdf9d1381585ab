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
