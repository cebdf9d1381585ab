"""Every reward module in rewards/ meets the contract; `posttrain rewards list/check` find and judge modules."""

import random

import pytest
from typer.testing import CliRunner

from posttrain.cli import app
from rewards.catalog import ENTRY_POINT_GROUP, builtin_modules, installed_modules
from rewards.contract import check_contract, fixture_batch
from rollout.process import EngineProcess
from tests.system_packages import ensure_bubblewrap

runner = CliRunner()


class WrongLength:
    name, version = "wrong_length", "1"

    def __call__(self, samples):
        return [1.0]


class Moody:
    name, version = "moody", "1"

    def __call__(self, samples):
        return [random.random() for _ in samples]


class Nameless:
    name, version = " ", "1"

    def __call__(self, samples):
        return [0.0 for _ in samples]


# Modules that need parameters, with the ones the contract runs them with.
PARAMS = {"rewards.mix.MixedReward": {"gates": [{"path": "rewards.rules.InstructGate"}],
                                      "domains": {"instruct": [{"path": "rewards.rules.InstructSoft"}],
                                                  "arith": [{"path": "rewards.verifiers.ArithExactMatch"}]}}}


JUDGE = "rewards.grm.GenerativeJudge"


@pytest.fixture(scope="module")
def judge_params(small_store, tmp_path_factory):
    """The GRM needs a judge served by an engine: the tiny init checkpoint, untrained, will do for the contract."""
    with EngineProcess(small_store["init"], tmp_path_factory.mktemp("judge") / "engine.log") as client:
        yield {"checkpoint": small_store["init"], "engine_url": client.base_url, "store": small_store["root"],
               "max_new_tokens": 8}


ORM = "rewards.orm.OrmScore"
CODE = "rewards.verifiers.CodeTests"


@pytest.fixture
def code_params():
    """The code verifier runs completions under bubblewrap (rollout/agents/envs/code_sandbox.py); defaults suffice."""
    ensure_bubblewrap()


@pytest.fixture(scope="module")
def orm_params(trained_orm):
    return {"checkpoint": trained_orm["checkpoint"], "store": trained_orm["root"]}


@pytest.mark.parametrize("path", [module.path for module in builtin_modules()])
def test_every_module_in_rewards_meets_the_contract(path, request):
    fixtures = {JUDGE: "judge_params", ORM: "orm_params", CODE: "code_params"}
    params = request.getfixturevalue(fixtures[path]) if path in fixtures else PARAMS.get(path)
    result = check_contract(path, params)
    assert len(result.scores) == len(fixture_batch())
    if path == JUDGE:  # an untrained judge writes no verdict line: every score None, which the contract refuses
        assert result.problems == [f"{JUDGE}: scored none of the {len(fixture_batch())} fixture samples (every score None)"]
    else:
        assert result.passed, result.problems


def test_the_builtin_catalog_finds_the_verifiers_and_not_the_protocol():
    paths = {module.path for module in builtin_modules()}
    assert {"rewards.verifiers.ArithExactMatch", "rewards.verifiers.ArithStepPrefix"} <= paths
    assert "rewards.protocol.RewardModule" not in paths


@pytest.mark.parametrize(("cls", "problem"), [
    (WrongLength, f"returned 1 scores for {len(fixture_batch())} samples"),
    (Moody, "two calls on the same batch gave different scores"),
    (Nameless, "`name` is empty"),
])
def test_a_module_that_breaks_the_contract_is_named_with_its_problem(cls, problem):
    result = check_contract(f"{__name__}.{cls.__name__}")
    assert not result.passed
    assert any(problem in text for text in result.problems), result.problems


def _install(tmp_path, monkeypatch):
    """A real installed distribution on sys.path that offers one reward module through the entry point group."""
    (tmp_path / "lab_rewards.py").write_text(
        "class Brevity:\n"
        "    '''1 for replies under 40 characters.'''\n"
        "    name, version = 'brevity', '2'\n"
        "    def __call__(self, samples):\n"
        "        return [float(len(s.response) < 40) for s in samples]\n"
    )
    dist = tmp_path / "lab_rewards-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-rewards\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbrevity = lab_rewards:Brevity\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_installed_packages_offer_modules_through_the_entry_point_group(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    offered = {module.path: module.origin for module in installed_modules()}
    assert offered.get("lab_rewards.Brevity") == "lab-rewards"
    assert check_contract("lab_rewards.Brevity").passed


def flat(output: str) -> str:
    """The CLI's text with rich's line wrapping undone (its width is fixed once per process)."""
    return " ".join(output.split())


def test_cli_lists_and_checks_modules(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch)
    listed = runner.invoke(app, ["rewards", "list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "rewards.verifiers.ArithExactMatch" in listed.output and "lab_rewards.Brevity" in listed.output

    passed = runner.invoke(app, ["rewards", "check", "lab_rewards:Brevity"], env={"COLUMNS": "200"})
    assert passed.exit_code == 0, passed.output
    assert "passes the reward contract" in flat(passed.output) and "brevity" in flat(passed.output)

    failed = runner.invoke(app, ["rewards", "check", f"{__name__}.WrongLength"], env={"COLUMNS": "200"})
    assert failed.exit_code == 1
    assert "wrong_length" in flat(failed.output) and f"returned 1 scores for {len(fixture_batch())} samples" in flat(failed.output)

    bad_params = runner.invoke(app, ["rewards", "check", "rewards.verifiers.FormatValid", "--params", "[1]"])
    assert bad_params.exit_code == 2 and "JSON object" in bad_params.output


class ExitsTheInterpreter:
    """Ends the process from inside a call: in-process, the check would print nothing and exit 0."""

    name, version = "exits", "1"

    def __call__(self, samples):
        import os

        os._exit(0)


class HoldsTheGil:
    """Holds the GIL in one C call far past the timeout: no in-process timer can stop it."""

    name, version = "holds_gil", "1"

    def __call__(self, samples):
        import re

        re.match(r"(a+)+$", "a" * 40 + "b")  # catastrophic backtracking inside the regex engine
        return [0.0] * len(samples)


class NeverScores:
    name, version = "never_scores", "1"

    def __call__(self, samples):
        return [None] * len(samples)


def test_the_cli_check_runs_the_module_in_a_child_and_names_how_it_ended():
    exits = runner.invoke(app, ["rewards", "check", f"{__name__}.ExitsTheInterpreter"], env={"COLUMNS": "200"})
    assert exits.exit_code == 1 and "ended before reporting (exit code 0" in flat(exits.output)
    hangs = runner.invoke(app, ["rewards", "check", f"{__name__}.HoldsTheGil", "--timeout-s", "1",
                                        "--start-up-s", "6"],
                          env={"COLUMNS": "200"})
    assert hangs.exit_code == 1 and "did not finish within 9 s" in flat(hangs.output)
    none = runner.invoke(app, ["rewards", "check", f"{__name__}.NeverScores"], env={"COLUMNS": "200"})
    assert none.exit_code == 1 and f"scored none of the {len(fixture_batch())} fixture samples" in flat(none.output)
    popen = runner.invoke(app, ["rewards", "check", "subprocess.Popen", "--params", '{"args": ["touch", "pwned"]}'],
                          env={"COLUMNS": "200"})
    assert popen.exit_code == 1 and "not from an allowed origin" in popen.output
