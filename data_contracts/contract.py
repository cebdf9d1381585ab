"""What a data contract is: a named, versioned Arrow schema plus the checks it implies."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from data_contracts.checks import Check


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    # Field nullability is part of the contract; pyarrow does not enforce it, validation does.
    schema: pa.Schema
    # List columns holding one value per token: never empty, at most max_tokens long, and
    # written without dictionary encoding (token ids rarely repeat enough to pay for it).
    token_columns: tuple[str, ...] = ()
    # Semantic checks, run after the structural ones (types, nulls, finiteness, token lengths).
    checks: tuple[Check, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"
