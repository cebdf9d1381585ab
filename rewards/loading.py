"""Load a reward module by dotted path and call it under guard: its failures name it, never pass silently."""

from __future__ import annotations

import hashlib
import inspect
import math
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import ImportString, TypeAdapter, ValidationError

from data_contracts.lineage import RewardModuleRef
from rewards.origin import declares_reward, origin_problem
from rewards.protocol import ComposedReward, RewardModule, RewardSample

_IMPORT = TypeAdapter(ImportString)
# A score past this is a bug (an overflow, a sentinel), not a preference: advantages would drown in it.
MAX_ABS_SCORE = 1e6


class RewardModuleError(RuntimeError):
    pass


def resolve_reward_target(path: str) -> object:
    """What `path` names — `package.module.Name` or `package.module:Name` from an allowed origin
    (rewards/origin.py), and if a class, one that declares itself a reward module — without constructing
    anything. Refused naming the path before it is imported (a disallowed origin) or constructed (a class
    without the shape). Configs call it when they are validated, trainers again when they load."""
    problem = origin_problem(path)
    if problem is not None:
        raise RewardModuleError(problem)
    try:
        target = _IMPORT.validate_python(path)
    except ValidationError as error:
        raise RewardModuleError(f"reward module {path!r} cannot be imported: {error.errors()[0]['msg']}") from error
    if inspect.isclass(target) and not declares_reward(target):
        raise RewardModuleError(f"reward module {path!r} is a class that does not declare itself a reward module "
                                "(a `name` and a `version` string and a `__call__`); it was not constructed")
    if not inspect.isclass(target) and not isinstance(target, RewardModule):
        raise RewardModuleError(f"reward module {path!r} is not a RewardModule: it names a {type(target).__name__}, "
                                "not a reward module class or instance (`package.module.Name`)")
    return target


def check_reward_params(path: str, params: dict | None = None) -> object:
    """The target `path` names, once `params` are known to fit it: every name one its constructor takes,
    and, for a module that composes others (`check_params`), theirs in turn. Nothing is constructed, so a
    spec check or a form refuses what the trainer's load would, before any stage runs."""
    target = resolve_reward_target(path)
    if params and not inspect.isclass(target):
        raise RewardModuleError(f"reward module {path!r} is an instance; params {sorted(params)} cannot be applied")
    if not inspect.isclass(target):
        return target
    try:
        inspect.signature(target).bind(**(params or {}))
    except TypeError as error:  # params it does not take: name them, not only the class
        raise RewardModuleError(f"reward module {path!r} cannot be built with params {sorted(params or {})}: "
                                f"{error}") from None
    check_params = getattr(target, "check_params", None)
    if check_params is not None:
        try:
            check_params(**(params or {}))
        except ValueError as error:
            raise RewardModuleError(f"reward module {path!r}: params: {error}") from None
    return target


def load_reward_module(path: str, params: dict | None = None) -> RewardModule:
    """The reward module `path` names (`resolve_reward_target`), a class instantiated with `params` once
    `check_reward_params` has found they fit."""
    target = check_reward_params(path, params)
    try:
        module = target(**(params or {})) if inspect.isclass(target) else target
    except TypeError as error:
        raise RewardModuleError(f"reward module {path!r} cannot be built with params {sorted(params or {})}: "
                                f"{error}") from error
    if not isinstance(module, RewardModule):
        raise RewardModuleError(f"reward module {path!r} is not a RewardModule: it needs `name`, `version` and __call__(samples)")
    return module


def reward_module_ref(path: str, module: RewardModule, params: dict | None = None) -> RewardModuleRef:
    """Lineage's record of the module: its path, parameters and the sha256 of its source file."""
    source = inspect.getsourcefile(type(module) if not inspect.isfunction(module) else module)
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest() if source else "unknown"
    return RewardModuleRef(path=path, source_sha256=digest, params={"name": module.name, "version": module.version, **(params or {})})


def reward_module_refs(path: str, module: RewardModule, params: dict | None = None) -> list[RewardModuleRef]:
    """The module's lineage record, then those of the modules it is composed of: every module that scores."""
    parts = module.components() if isinstance(module, ComposedReward) else []
    return [reward_module_ref(path, module, params), *(reward_module_ref(p, m, q) for p, q, m in parts)]


def score_batch(module: RewardModule, samples: Sequence[RewardSample], timeout_s: float = 60.0) -> list[float | None]:
    """The module's scores, checked: one per sample, each a finite float or None.

    A module that raises, runs past `timeout_s`, or returns the wrong length or a non-finite value
    fails the batch with a RewardModuleError naming it.
    """
    label = f"reward module {module.name!r} (version {module.version})"
    outcome: dict = {}

    def call() -> None:
        try:
            outcome["scores"] = module(list(samples))
        except BaseException as error:  # re-raised below, in the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=call, name=f"reward-{module.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardModuleError(f"{label} did not return within {timeout_s:g} s on a batch of {len(samples)}")
    if "error" in outcome:
        error = outcome["error"]
        raise RewardModuleError(f"{label} raised {type(error).__name__}: {error}") from error
    scores = outcome["scores"]
    if not isinstance(scores, Sequence) or len(scores) != len(samples):
        got = len(scores) if isinstance(scores, Sequence) else type(scores).__name__
        raise RewardModuleError(f"{label} returned {got} scores for {len(samples)} samples")
    checked: list[float | None] = []
    for index, score in enumerate(scores):
        if score is None:
            checked.append(None)
            continue
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise RewardModuleError(f"{label} returned {score!r} ({type(score).__name__}) for sample {index}: "
                                    "scores must be floats or None")
        if not math.isfinite(score) or abs(score) > MAX_ABS_SCORE:
            raise RewardModuleError(f"{label} returned {score!r} for sample {index}: scores must be finite and "
                                    f"within ±{MAX_ABS_SCORE:g}")
        checked.append(float(score))
    return checked
