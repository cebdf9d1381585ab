"""The checkpoint and dataset fields of the deployments' forms offer what the store holds.

A form's `init_checkpoint` and a teacher's `checkpoint` become a choice between the store's references (STAGE:latest
and NAME:latest first, then each committed name, newest first) and free text (a URI, or a name committed later);
a `datasets` list, between a multi-select of the store's datasets and a list of free texts; the field's description lists the choices with their stage, date and headline
metric, which a select cannot show. `flows/serve.py` writes these schemas into the deployments when the UI
starts and again whenever the store's contents change.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from data_contracts.lineage import Lineage
from infra.references import LATEST, stage_checkpoints
from infra.store import ArtifactStore

CHECKPOINT_FIELDS = ("init_checkpoint", "checkpoint")
DATASET_FIELDS = ("datasets",)
MOST_NAMES = 40  # per kind, besides the :latest ones: a select of hundreds is not a choice


@dataclass(frozen=True)
class Choice:
    value: str
    label: str


@dataclass(frozen=True)
class Catalog:
    checkpoints: tuple[Choice, ...]
    datasets: tuple[Choice, ...]


def store_catalog(store: ArtifactStore) -> Catalog:
    checkpoints = [(name, Lineage.model_validate(store.open(name).lineage())) for name in stage_checkpoints(store)]
    datasets = [(name, Lineage.model_validate(store.open(name).lineage())) for name in store.list_committed("datasets/")]
    return Catalog(_choices(checkpoints, lambda name, _: name.split("/")[1]),
                   _choices(datasets, lambda _, lineage: lineage.name))


def _choices(committed: list[tuple[str, Lineage]], label_of) -> tuple[Choice, ...]:
    """NAME:latest for each label (the newest committed under it), then every name, newest first."""
    newest_first = sorted(committed, key=lambda item: item[1].created_at, reverse=True)
    latest: dict[str, Choice] = {}
    for name, lineage in newest_first:
        label = label_of(name, lineage)
        latest.setdefault(label, Choice(f"{label}{LATEST}", f"{label}{LATEST}: {_described(name, lineage)}"))
    names = [Choice(name, f"{name}: {_described(name, lineage)}") for name, lineage in newest_first[:MOST_NAMES]]
    return tuple(sorted(latest.values(), key=lambda choice: choice.value)) + tuple(names)


def _described(name: str, lineage: Lineage) -> str:
    headline = next(iter(sorted(lineage.eval_summary.items())), None)
    shown = f"{lineage.name.split(' ')[0]}, {lineage.created_at:%Y-%m-%d %H:%M}"
    return shown + (f", {headline[0]} {headline[1]:.3g}" if headline else "")


def with_pickers(schema: dict, catalog: Catalog) -> dict:
    """A deployment's parameter schema with its checkpoint and dataset fields as pickers over `catalog`."""
    picked = copy.deepcopy(schema)
    for definition in picked.get("definitions", {}).values():
        for name, field in definition.get("properties", {}).items():
            if name in CHECKPOINT_FIELDS and field.get("type") == "string":
                definition["properties"][name] = _picker(field, catalog.checkpoints, "checkpoint")
            elif name in DATASET_FIELDS and field.get("type") == "array":
                definition["properties"][name] = _list_picker(field, catalog.datasets, "datasets")
    return picked


def _picker(field: dict, choices: tuple[Choice, ...], kind: str) -> dict:
    if not choices:
        return field
    kept = {key: value for key, value in field.items() if key not in ("type", "minLength")}
    return {**kept, "description": _listed(field.get("description", ""), choices), "anyOf": [
        {"title": f"a {kind} in the store", "type": "string", "enum": [choice.value for choice in choices]},
        {"title": "a URI or name", "type": "string", "minLength": 1}]}


def _list_picker(field: dict, choices: tuple[Choice, ...], kind: str) -> dict:
    """A list field as a choice between a multi-select of the store's references and a list of free texts: the
    form draws a list of strings with an enum as a multi-select, but any other list item as a JSON box."""
    if not choices:
        return field
    own = {key: value for key, value in field.items() if key in ("title", "description", "position", "default")}
    rules = {key: value for key, value in field.items() if key in ("minItems", "maxItems", "uniqueItems")}
    return {**own, "description": _listed(field.get("description", ""), choices), "anyOf": [
        {"title": f"{kind} in the store", "type": "array", **rules,
         "items": {"type": "string", "enum": [choice.value for choice in choices]}},
        {"title": "URIs or names", "type": "array", **rules, "items": {"type": "string", "minLength": 1}}]}


def _listed(description: str, choices: tuple[Choice, ...]) -> str:
    latest = [choice.label for choice in choices if choice.value.endswith(LATEST)]
    return f"{description}\n\nIn the store: " + "; ".join(latest) if latest else description
