"""Which agent tasks exist, and loading one by name: the tasks of this package and those installed
packages offer through the `posttrain.tasks` entry point group, or any class by dotted path.

An installed package offers a task in its pyproject.toml:

    [project.entry-points."posttrain.tasks"]
    sql = "my_package.tasks:SqlTask"

A stage config then names it `sql` (or `my_package.tasks.SqlTask`). Only a class with the AgentTask
shape (`name`, `tools`, `check_row`, `execute`, `succeeded`) is ever constructed.
"""

from __future__ import annotations

import inspect
from importlib.metadata import entry_points

from pydantic import ImportString, TypeAdapter, ValidationError

from rollout.agents.envs.tasks import AgentTask

ENTRY_POINT_GROUP = "posttrain.tasks"
_IMPORT = TypeAdapter(ImportString)


class UnknownTaskError(ValueError):
    pass


def known_tasks() -> list[str]:
    """The task names installed distributions (this one included) offer."""
    return sorted({entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)})


def task_class(name: str) -> type:
    """The class a task name (an entry point) or dotted path (`package.module.Class`) stands for."""
    offered = {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    if name in offered:
        target = offered[name].load()
    elif "." in name:
        try:
            target = _IMPORT.validate_python(name)
        except ValidationError as error:
            raise UnknownTaskError(f"agent task {name!r} cannot be imported: {error.errors()[0]['msg']}") from error
    else:
        raise UnknownTaskError(f"unknown agent task {name!r}; known: {', '.join(known_tasks())} (or a dotted path)")
    if not (inspect.isclass(target) and _looks_like_task(target)):
        raise UnknownTaskError(f"agent task {name!r} is not an AgentTask class: it needs `name`, `tools`, "
                               "`check_row(reference, metadata)`, `execute(call, episode)` and `succeeded(episode)`")
    return target


def load_task(name: str) -> AgentTask:
    return task_class(name)()


def _looks_like_task(cls: type) -> bool:
    return isinstance(getattr(cls, "name", None), str) and isinstance(getattr(cls, "tools", None), list) \
        and all(callable(getattr(cls, method, None)) for method in ("check_row", "execute", "succeeded"))
