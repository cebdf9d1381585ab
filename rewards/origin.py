"""Where reward modules may come from, checked before anything is imported or built.

A reward path names a class (or function) in this project's `rewards` package, the target of an
installed distribution's `posttrain.rewards` entry point, or a module inside a package the operator
allow-lists in $POSTTRAIN_REWARD_PACKAGES (comma-separated, e.g. `my_lab.rewards,tests`). A class must
declare itself a reward module (a `name` and a `version` string, its own `__call__`) before it is
constructed: a config that names anything else is refused, naming the path, and runs nothing.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "posttrain.rewards"
ALLOWED_PACKAGES_ENV = "POSTTRAIN_REWARD_PACKAGES"


def split_path(path: str) -> tuple[str, str]:
    """(module, attribute) of `package.module.Name` or `package.module:Name`."""
    module, separator, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    if not separator or not module or not attribute:
        raise ValueError(f"reward module {path!r} is not a dotted path (package.module.Name)")
    return module, attribute


def allowed_packages() -> list[str]:
    """The packages reward modules may be imported from: ours and the operator's."""
    return ["rewards", *(p.strip() for p in os.environ.get(ALLOWED_PACKAGES_ENV, "").split(",") if p.strip())]


def offered_targets() -> set[tuple[str, str]]:
    """(module, attribute) of every entry point in the `posttrain.rewards` group."""
    return {split_path(entry.value) for entry in entry_points(group=ENTRY_POINT_GROUP)}


def origin_problem(path: str) -> str | None:
    """Why `path` may not be loaded, or None when its origin is allowed."""
    try:
        module, attribute = split_path(path)
    except ValueError as error:
        return str(error)
    if any(module == package or module.startswith(package + ".") for package in allowed_packages()):
        return None
    if (module, attribute) in offered_targets():
        return None
    return (f"reward module {path!r} is not from an allowed origin: the `rewards` package, an installed "
            f"`{ENTRY_POINT_GROUP}` entry point, or a package listed in ${ALLOWED_PACKAGES_ENV}; nothing was imported")


def declares_reward(cls: type) -> bool:
    """A class that says it is a reward module: `name` and `version` strings and its own `__call__`."""
    return isinstance(getattr(cls, "name", None), str) and isinstance(getattr(cls, "version", None), str) \
        and any("__call__" in vars(base) for base in cls.__mro__ if base is not object)
