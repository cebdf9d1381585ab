"""Versioned Arrow schemas for the pipeline's Parquet artifacts, with validated reads and writes.

    from data_contracts import CHAT_V1, read_parquet, write_parquet

    write_parquet(CHAT_V1, rows, "sft/train.parquet")
    table = read_parquet(CHAT_V1, "sft/train.parquet")

Every violation surfaces as one ContractError naming the file, column and row.
"""

from data_contracts.chat import CHAT_V1
from data_contracts.contract import Contract
from data_contracts.errors import ContractError
from data_contracts.evals import EVAL_V1
from data_contracts.parquet import CONTRACT_METADATA_KEY, read_parquet, write_parquet
from data_contracts.preference import PREFERENCE_V1
from data_contracts.prompt import PROMPT_V1
from data_contracts.registry import get_contract
from data_contracts.rollout import ROLLOUT_V1
from data_contracts.validate import DEFAULT_MAX_TOKENS, validate_table

__all__ = [
    "CHAT_V1",
    "CONTRACT_METADATA_KEY",
    "DEFAULT_MAX_TOKENS",
    "EVAL_V1",
    "PREFERENCE_V1",
    "PROMPT_V1",
    "ROLLOUT_V1",
    "Contract",
    "ContractError",
    "get_contract",
    "read_parquet",
    "validate_table",
    "write_parquet",
]
