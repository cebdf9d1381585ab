"""Reward modules: resolution and `rewards check`."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from bench.hostile.cases import Case

HOSTILE_MODULE = '''
import os, time


class Base:
    version = "1"

    def __init__(self, **params):
        pass


class ExitsProcess(Base):
    name = "exits"

    def __call__(self, samples):
        os._exit(0)


class HoldsTheGil(Base):
    name = "gil"

    def __call__(self, samples):
        sum(range(10**12))


class AllNone(Base):
    name = "none"

    def __call__(self, samples):
        return [None] * len(samples)


class Booleans(Base):
    name = "bools"

    def __call__(self, samples):
        return [True] * len(samples)


class Huge(Base):
    name = "huge"

    def __call__(self, samples):
        return [1e308] * len(samples)


class NotANumber(Base):
    name = "nan"

    def __call__(self, samples):
        return [float("nan")] * len(samples)


class Raises(Base):
    name = "raises"

    def __call__(self, samples):
        raise RuntimeError("boom")


class WrongLength(Base):
    name = "short"

    def __call__(self, samples):
        return [0.5]


class SideEffectOnImport(Base):
    name = "fine"

    def __call__(self, samples):
        return [0.5] * len(samples)
'''


def reward_cases(scratch: Path) -> list[Case]:
    from rewards.isolated import check_contract_isolated
    from rewards.loading import load_reward_module

    package = scratch / "hostile_rewards"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(HOSTILE_MODULE))
    sys.path.insert(0, str(scratch))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")])
    os.environ["POSTTRAIN_REWARD_PACKAGES"] = "hostile_rewards"

    def load(path, params=None):
        return lambda: load_reward_module(path, params)

    def check(path):
        return lambda: check_contract_isolated(path, timeout_s=5.0, start_up_s=30.0)

    cases = [
        ("load subprocess.Popen with args", load("subprocess.Popen", {"args": ["touch", str(scratch / "pwned")]}),
         "subprocess.Popen"),
        ("load os.system", load("os.system"), "os.system"),
        ("load builtins.exec", load("builtins.exec"), "builtins.exec"),
        ("load a module, not a class", load("rewards.verifiers"), "rewards.verifiers"),
        ("load a class that is not a reward", load("rewards.loading.RewardModuleError"), "RewardModuleError"),
        ("load a missing name", load("rewards.verifiers.Nope"), "Nope"),
        ("load an empty path", load(""), "''"),
        ("load a path with ..", load("rewards..verifiers.ArithExactMatch"), "rewards..verifiers"),
        ("load with params the class refuses", load("rewards.verifiers.ArithExactMatch", {"x": 1}), "params ['x']"),
        ("check os._exit(0)", check("hostile_rewards.ExitsProcess"), "ended before reporting"),
        ("check a GIL-holding hang", check("hostile_rewards.HoldsTheGil"), "did not finish"),
        ("check all None", check("hostile_rewards.AllNone"), "None"),
        ("check booleans", check("hostile_rewards.Booleans"), "bool"),
        ("check 1e308", check("hostile_rewards.Huge"), "1e+308"),
        ("check NaN", check("hostile_rewards.NotANumber"), "nan"),
        ("check raises", check("hostile_rewards.Raises"), "boom"),
        ("check wrong length", check("hostile_rewards.WrongLength"), "1 score"),
        ("check subprocess.Popen", check("subprocess.Popen"), "subprocess.Popen"),
    ]
    return [Case("reward modules", what, attempt, names) for what, attempt, names in cases]
