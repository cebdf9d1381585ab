"""Which reward modules are available: the classes in this package and those installed packages offer.

An installed package offers modules through the `posttrain.rewards` entry point group, e.g. in its
pyproject.toml:

    [project.entry-points."posttrain.rewards"]
    my_judge = "my_package.rewards:MyJudge"

Either kind is then used by dotted path (`my_package.rewards.MyJudge`) in a stage config.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points

from rewards.origin import ENTRY_POINT_GROUP, declares_reward


@dataclass(frozen=True)
class AvailableModule:
    path: str  # what a stage config names: package.module.Name
    origin: str  # "posttrain" or the distribution that offers it
    summary: str  # the first line of its docstring


def builtin_modules() -> list[AvailableModule]:
    """Every class in the `rewards` package's modules that has the Protocol's name, version and __call__."""
    import rewards

    found = []
    for info in sorted(pkgutil.iter_modules(rewards.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"rewards.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and declares_reward(cls):
                found.append(AvailableModule(f"{module.__name__}.{cls.__name__}", "posttrain", _summary(cls)))
    return found


def installed_modules() -> list[AvailableModule]:
    """Modules offered through the entry point group, by installed distributions."""
    found = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda entry: entry.name):
        origin = entry.dist.name if entry.dist is not None else "unknown distribution"
        found.append(AvailableModule(entry.value.replace(":", "."), origin, f"entry point {entry.name!r}"))
    return found


def _summary(cls: type) -> str:
    return (inspect.getdoc(cls) or "").split("\n", 1)[0]
