"""Lookup of contracts by id, so files and configs can refer to them as plain strings."""

from __future__ import annotations

from data_contracts.chat import CHAT_V1
from data_contracts.contract import Contract
from data_contracts.evals import EVAL_V1
from data_contracts.preference import PREFERENCE_V1
from data_contracts.prompt import PROMPT_V1
from data_contracts.rollout import ROLLOUT_V1

CONTRACTS: dict[str, Contract] = {
    contract.id: contract for contract in (CHAT_V1, PROMPT_V1, ROLLOUT_V1, PREFERENCE_V1, EVAL_V1)
}


def get_contract(contract_id: str) -> Contract:
    """The contract with id ``contract_id`` ("chat@1"); KeyError naming the known ids otherwise."""
    try:
        return CONTRACTS[contract_id]
    except KeyError:
        raise KeyError(f"unknown contract {contract_id!r}; known: {', '.join(sorted(CONTRACTS))}") from None
