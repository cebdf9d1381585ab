"""Shorthands that make nullability explicit in every contract schema."""

from __future__ import annotations

import pyarrow as pa


def required(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=False)


def optional(name: str, type_: pa.DataType) -> pa.Field:
    return pa.field(name, type_, nullable=True)


def list_of(type_: pa.DataType) -> pa.ListType:
    """A list whose elements are never null (a list column may still be null itself)."""
    return pa.list_(pa.field("item", type_, nullable=False))
