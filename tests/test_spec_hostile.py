"""A spec file a careless or hostile author wrote: refused by `spec check`, naming the line, field or limit,
before anything is expanded, imported or run."""

from __future__ import annotations

import os
import time

import pytest
from typer.testing import CliRunner

from flows.spec import SpecError, load_spec, parse_spec
from flows.spec_reading import MAX_VALUES, read_document
from infra.store import check_store_root
from posttrain.cli import app

MINIMAL = {"model": {"preset": "glm5-tiny"}, "data": {"suites": {"instruct": {}}}}

BOMB = """\
model: {preset: glm5-tiny}
data: {suites: {instruct: {}}}
stages:
  general_rl:
    datasets: [instruct]
    rewards:
      - path: rewards.rules.InstructSoft
        params:
          a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
          b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
          c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
          d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
          e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
          f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
          g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
          h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
          i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def spec_check(path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["spec", "check", str(path)], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_an_alias_bomb_is_refused_by_its_expanded_size_before_anything_expands_it(tmp_path):
    (tmp_path / "bomb.yaml").write_text(BOMB)
    started = time.monotonic()
    code, output = spec_check(tmp_path / "bomb.yaml")
    assert code == 1 and f"more than {MAX_VALUES:,} values" in output and "bomb.yaml" in output
    assert time.monotonic() - started < 10
    shared = "base: &base {lr: 1}\nuse: [*base, *base]\n"  # a few aliases, as people write them, still load
    assert read_document(shared, "s", json_text=False) == {"base": {"lr": 1}, "use": [{"lr": 1}, {"lr": 1}]}


def test_a_key_given_twice_is_refused_naming_both_lines_not_silently_replaced(tmp_path):
    (tmp_path / "twice.yaml").write_text("model: {preset: glm5-tiny}\nstages:\n  sft: {datasets: [a]}\n"
                                         "  sft: {datasets: [b]}\n")
    code, output = spec_check(tmp_path / "twice.yaml")
    assert code == 1 and "line 4" in output and "duplicate key 'sft' (first on line 3)" in output
    assert len(output.strip().splitlines()) == 1
    with pytest.raises(SpecError, match="duplicate key 'seed'"):
        read_document('{"seed": 1, "seed": 2}', "spec.json", json_text=True)
    merged = read_document("base: &b {lr: 1, wd: 0}\nsft:\n  <<: *b\n  lr: 2\n", "s", json_text=False)
    assert merged["sft"] == {"lr": 2, "wd": 0}  # a merge key's override is what merge keys are for


def test_deep_nesting_is_a_named_error_not_a_recursion_traceback():
    with pytest.raises(SpecError, match="nested deeper"):
        read_document("[" * 100_000, "deep.yaml", json_text=False)
    with pytest.raises(SpecError, match="nested deeper"):
        read_document('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "deep.json", json_text=True)


@pytest.mark.parametrize("reward, says", [
    ({"path": "rewards.rules.InstructSoft", "params": {"bogus_param": 1}}, "params ['bogus_param']"),
    ({"path": "rewards.verifiers"}, "names a module"),
    ({"path": "rewards.mix.MixedReward", "params": {}}, "missing a required argument: 'domains'"),
    ({"path": "rewards.mix.MixedReward", "params": {"domains": {"instruct": [
        {"path": "rewards.rules.InstructSoft", "params": {"x": 1}}]}}}, "domains.instruct: reward module"),
    ({"path": "rewards.mix.MixedReward", "params": {"domains": {"instruct": [{"path": "os.system"}]}}}, "os.system"),
])
def test_reward_params_and_paths_are_checked_by_spec_check_as_the_trainer_loads_them(reward, says):
    document = {**MINIMAL, "stages": {"general_rl": {"datasets": ["instruct"], "rewards": [reward]}}}
    with pytest.raises(SpecError, match="rewards") as refused:
        parse_spec(document, "spec.yaml")
    assert says in str(refused.value)
    fine = {"path": "rewards.mix.MixedReward", "params": {"domains": {"instruct": [
        {"path": "rewards.rules.InstructSoft"}]}, "timeout_s": 5}}
    parse_spec({**document, "stages": {"general_rl": {"datasets": ["instruct"], "rewards": [fine]}}}, "spec.yaml")


@pytest.mark.parametrize("change, field", [
    ({"data": {"suites": {"instruct": {"train": -5}}}}, "data.suites.instruct.train"),
    ({"data": {"suites": {"instruct": {"train": 1e38}}}}, "data.suites.instruct.train"),
    ({"data": {"suites": {"instruct": {"test": 0}}}}, "data.suites.instruct.test"),
    ({"seed": 2**128}, "seed"),
    ({"seed": -1}, "seed"),
])
def test_sizes_and_seeds_are_bounded(change, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        parse_spec({**MINIMAL, **change, "stages": {"sft": {"datasets": ["instruct"]}}}, "spec.yaml")


@pytest.mark.parametrize("root, says", [
    ("s3://127.0.0.1:9/bucket/../../x", "not an S3 bucket name"),
    ("s3://bucket/a/../b", "'..' segments"),
    ("s3://bucket/x?versionId=1", "?query"),
    ("/proc/self/fd", "kernel or device file system"),
    ("file:///dev/shm/x", "kernel or device file system"),
    ("ftp://host/x", "unsupported store scheme"),
])
def test_a_store_root_that_cannot_hold_artifacts_is_refused_as_the_spec_is_read(root, says):
    with pytest.raises(SpecError, match="store") as refused:
        parse_spec({**MINIMAL, "store": root, "stages": {"sft": {"datasets": ["instruct"]}}}, "spec.yaml")
    assert says in str(refused.value)


def test_store_roots_people_use_are_accepted(tmp_path):
    for root in ("s3://my-bucket", "s3://my-bucket/team/posttrain", str(tmp_path / "new"), tmp_path.as_uri(),
                 "./artifacts"):
        assert check_store_root(root) == root
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ValueError, match="not a folder"):
        check_store_root(str(tmp_path / "a-file"))


def test_a_device_or_a_fifo_given_as_the_spec_is_refused_at_once(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(SpecError, match="a FIFO"):
        load_spec(fifo)
    with pytest.raises(SpecError, match="a character device"):
        load_spec("/dev/zero")
    assert time.monotonic() - started < 5
    (tmp_path / "big.yaml").write_text("# " + "x" * (2 << 20))
    with pytest.raises(SpecError, match="bytes, the most this reads"):
        load_spec(tmp_path / "big.yaml")


def test_every_command_that_reads_a_store_takes_store_and_checks_it(tmp_path):
    for command in (["lineage", "x"], ["rollouts", "x"], ["prepare"], ["data", "import", "x.jsonl", "--as", "chat"],
                    ["data", "filter", "x", "--checkpoint", "y", "--samples", "2"], ["spec", "check", "x.yaml"]):
        result = CliRunner().invoke(app, [*command, "--store", "/proc/self"], env={"COLUMNS": "200"})
        assert result.exit_code == 2 and "--store" in result.output and "kernel or device" in result.output, command
        assert len(result.output.strip().splitlines()) == 1


def test_spec_check_names_an_import_that_is_a_device_or_a_fifo_as_a_problem_of_that_import(tmp_path):
    from flows.spec_plan import plan_spec

    os.mkfifo(tmp_path / "rows.jsonl")
    (tmp_path / "spec.yaml").write_text("model: {preset: glm5-tiny}\ndata: {imports: {\n"
                                        "  fifo: {path: rows.jsonl, as: chat}, zero: {path: /dev/zero, as: chat}}}\n"
                                        "stages:\n  sft: {datasets: [fifo, zero]}\n")
    plan = plan_spec(*load_spec(tmp_path / "spec.yaml"))
    assert [problem.split(":")[0] for problem in plan.problems] == ["data.imports.fifo", "data.imports.zero"]
    assert "a FIFO" in plan.problems[0] and "a character device" in plan.problems[1]
