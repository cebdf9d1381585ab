"""The deployments' parameter schemas reshaped for Prefect's Run form, which renders some JSON Schema poorly.

Prefect's form draws every `anyOf` as a row of buttons, one per branch. pydantic writes a field `X | None = None`
as `anyOf: [X, null]` with `default: null`, so each optional field opened on its `None` button with the line
'Property is type "None"' under it, and a wrong value (micro-batch -2) was refused as "not valid under any of
the given schemas" instead of by X's own rule. Here such a field is X alone, without a default: the form shows
X's input, empty; left empty, the field is left out of the run's parameters and the config's default (None)
applies. A field with a real default keeps it, and a union of several real types (the launch targets) keeps
its buttons. The form fills a settings object's fields from the object's default, so the Nones go from those
defaults too. The same schema validates runs created through the API, which leave such a field out rather
than send null.
"""

from __future__ import annotations

import copy

NULL = {"type": "null"}


def for_the_form(schema: dict) -> dict:
    """`schema` (a flow's parameter schema, with its `definitions`) with every optional field as its one type."""
    shaped = copy.deepcopy(schema)
    for properties in [shaped.get("properties", {})] + [d.get("properties", {}) for d in shaped.get("definitions", {}).values()]:
        for name, field in properties.items():
            properties[name] = without_null(field)
            if "default" in properties[name]:
                properties[name]["default"] = without_nones(properties[name]["default"])
    return shaped


def without_null(field: dict) -> dict:
    branches = field.get("anyOf", [])
    if NULL not in branches:
        return field
    kept = [branch for branch in branches if branch != NULL]
    # The field's own title, description and position stay; a default of None goes with the null branch.
    own = {key: value for key, value in field.items() if key != "anyOf" and not (key == "default" and value is None)}
    return {**kept[0], **own} if len(kept) == 1 else {**own, "anyOf": kept}


def without_nones(value):
    """A default with its None entries left out, at any depth."""
    if isinstance(value, dict):
        return {key: without_nones(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nones(item) for item in value]
    return value
