"""`posttrain data import DIR --as harbor` under real bubblewrap: examples/harbor gives two terminal task rows and one
task refused by name; an imported row replayed through the terminal task's real service succeeds and an untouched
one fails, without the tests ever being in the agent's view; a task needing what the sandbox lacks, or whose
solution or tests do not hold, is refused naming the file and the reason."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from data_prep.harbor_import import import_harbor, imported_row
from data_prep.harbor_tasks import TaskRefused
from data_prep.import_data import ImportFailed
from flows.prepare_data import prepare_data
from flows.spec import parse_spec
from infra.publish import published_contract
from infra.store import open_store
from posttrain.cli import app
from rollout.engine_settings import EngineSettings
from stages.agentic.config import AgenticRlConfig
from stages.common.agent_tasks import agent_task_rows, load_task_split
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.settings import EvalSettings
from stages.evaluation.tool_tasks import episode_settings
from tests.code_task_checks import FINAL_TURN, task_service, tool_turn

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "harbor"


pytestmark = pytest.mark.usefixtures("bubblewrap")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The examples imported once through the command line (a copy: the rejects file is written beside the folder)."""
    folder = tmp_path_factory.mktemp("harbor") / "harbor"
    shutil.copytree(EXAMPLES, folder)
    result = CliRunner().invoke(app, ["data", "import", str(folder), "--as", "harbor", "--skip-bad-rows",
                                      "--store", str(folder.parent / "store")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    dataset = open_store(str(folder.parent / "store")).open(re.search(r"file://\S+", result.output).group())
    rows = {split: load_task_split([dataset], split, folder.parent / f"read-{split}") for split in ("train", "test")}
    return folder, result.output, agent_task_rows(rows["train"] + rows["test"], ["terminal"], data_seed=0)["terminal"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with task_service("terminal", tmp_path_factory.mktemp("terminal")) as running:
        yield running


def test_the_examples_give_two_tasks_and_the_malformed_one_is_refused_by_name(imported):
    folder, output, rows = imported
    assert sorted(row["id"] for row in rows) == ["count-error-lines", "rename-reports"]
    assert f"refused {folder}/fix-greeting-script: no tests/test.sh" in output
    (reject,) = [json.loads(line) for line in (folder.parent / "harbor.rejected.jsonl").read_text().splitlines()]
    assert reject["where"] == f"{folder}/fix-greeting-script" and reject["problem"].startswith("no tests/test.sh")
    count = next(row for row in rows if row["id"] == "count-error-lines")
    assert count["messages"][0]["content"].startswith("Count the lines of `server.log`")
    assert count["reference_answer"] == (EXAMPLES / "count-error-lines/solution/solve.sh").read_text()
    assert set(count["metadata"]["files"]) == {"server.log"}  # the Dockerfile is recorded, not a workspace file
    assert count["metadata"]["harbor"]["dockerfile"].startswith("FROM debian:bookworm-slim")
    assert count["metadata"]["harbor"]["config"]["metadata"]["category"] == "file-operations"
    assert AgenticRlConfig.accepts_contract("prompt@1")  # agentic RL and its evaluation read these rows


def test_without_skip_bad_rows_the_refusal_is_listed_and_nothing_is_committed(tmp_path):
    folder = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "fix-greeting-script", folder / "fix-greeting-script")
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(ImportFailed, match=r"fix-greeting-script: no tests/test.sh.*\n1 of 1 tasks refused"):
        import_harbor(store, folder)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("_SUCCESS"))


def test_a_replayed_solution_succeeds_and_doing_nothing_fails(imported, service):
    for row in imported[2]:
        reset = {"messages": row["messages"], "reference": row["reference_answer"], "metadata": row["metadata"]}
        service.call("/reset", episode_id=f"solve-{row['id']}", **reset)
        step = service.call("/step", episode_id=f"solve-{row['id']}",
                            text=tool_turn("bash", command=row["reference_answer"]))
        assert not step["done"] and "[exit code" not in step["tool_results"][0], step
        assert service.call("/step", episode_id=f"solve-{row['id']}", text=FINAL_TURN)["done"]
        assert service.call("/verify", episode_id=f"solve-{row['id']}")["reward"] == 1.0, row["id"]

        service.call("/reset", episode_id=f"idle-{row['id']}", **reset)
        assert service.call("/step", episode_id=f"idle-{row['id']}", text=FINAL_TURN)["done"]
        assert service.call("/verify", episode_id=f"idle-{row['id']}")["reward"] == 0.0, row["id"]
    assert service.workspaces() == []


def test_the_tests_are_not_in_the_agents_view_during_the_episode(imported, service):
    row = next(row for row in imported[2] if row["id"] == "count-error-lines")
    service.call("/reset", episode_id="look", messages=row["messages"], reference=row["reference_answer"],
                 metadata=row["metadata"])
    # A Python install under the host's /tmp (a checkout there) is bound back into the sandbox's /tmp: not the tests.
    prefix = Path(sys.prefix).resolve()
    python = f"/tmp/{prefix.relative_to('/tmp').parts[0]}" if prefix.is_relative_to("/tmp") else "/nonexistent"
    looks = {"listing": f"find . /tmp -mindepth 1 -path {python} -prune -o -print | sort",
             "verifier folders": "ls /tests /logs",
             "fixture": f"grep -rl --exclude-dir={Path(python).name} 'hidden fixture' . /tmp; echo searched"}
    seen = {name: service.call("/step", episode_id="look", text=tool_turn("bash", command=command))["tool_results"][0]
            for name, command in looks.items()}
    assert seen["listing"] == "./server.log", seen
    assert "No such file or directory" in seen["verifier folders"], seen
    assert seen["fixture"] == "searched", seen
    (workspace,) = service.workspaces()
    assert sorted(path.name for path in workspace.rglob("*")) == ["server.log"]
    service.call("/abandon", episode_id="look")


def test_an_agent_cannot_forge_the_reward(imported, service):
    row = next(row for row in imported[2] if row["id"] == "count-error-lines")
    service.call("/reset", episode_id="forge", messages=row["messages"], reference=row["reference_answer"],
                 metadata=row["metadata"])
    forge = ("mkdir -p /tmp/harbor/logs/verifier && echo 1 > /tmp/harbor/logs/verifier/reward.txt; "  # its own /tmp
             "printf 'import sys\\nsys.exit(0)\\n' | tee json.py pathlib.py")  # modules the reward reader imports
    service.call("/step", episode_id="forge", text=tool_turn("bash", command=forge))
    assert service.call("/step", episode_id="forge", text=FINAL_TURN)["done"]
    assert service.call("/verify", episode_id="forge")["reward"] == 0.0


def example_copy(tmp_path: Path, name: str = "count-error-lines") -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


# Each case: what is changed in a copy of count-error-lines, and what the refusal says.
REFUSALS = {
    "installs in test.sh": ("tests/test.sh", "apt-get install -y jq\n", "tests/test.sh line 1 runs `apt-get install -y`"),
    "pip in test.sh": ("tests/test.sh", "python3 -m pip install requests\n",
                       "tests/test.sh line 1 runs `python3 -m pip`: installing needs the network"),
    "downloads in solve.sh": ("solution/solve.sh", "curl -sO https://example.org/x\n",
                              "solution/solve.sh line 1 runs `curl -sO`: the sandbox has no network"),
    "a tool not on PATH": ("tests/test.sh", "set -e\nharbor-no-such-tool --check\n",
                           "tests/test.sh line 2 runs `harbor-no-such-tool`, which is not on the sandbox's PATH"),
    "a package the host lacks": ("environment/Dockerfile", "FROM debian\nRUN apt-get update && apt-get install -y "
                                 "harbor-no-such-package\n", "environment/Dockerfile line 2: `apt-get install -y "
                                 "harbor-no-such-package` installs harbor-no-such-package, which this machine lacks"),
    "a Python package the host lacks": ("environment/Dockerfile", "FROM python:3.11\nRUN pip install "
                                        "harbor-no-such-dist==1.0\n", "installs harbor-no-such-dist, which this "
                                        "machine's Python lacks"),
    "a RUN step not replayed": ("environment/Dockerfile", "FROM debian\nRUN useradd agent\n",
                                "environment/Dockerfile line 2: RUN `useradd agent` is not replayed"),
    "a module the host lacks": ("tests/test_more.py", "import harbor_no_such_module\n",
                                "tests/test_more.py line 1 imports `harbor_no_such_module`"),
    "the image's WORKDIR": ("tests/test.sh", "cat /app/error_count.txt\n",
                            "tests/test.sh line 1 uses /app, a folder of the task's image"),
    "an unreadable task.toml": ("task.toml", "[metadata\n", "task.toml: not TOML this can read"),
    "a field of the wrong type": ("task.toml", "[verifier]\ntimeout_sec = 'soon'\n",
                                  "task.toml: verifier.timeout_sec must be a number"),
    "no instruction": ("instruction.md", None, "no instruction.md"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_task_the_sandbox_cannot_run_or_that_is_malformed_is_refused_naming_why(tmp_path, case):
    relative, text, reason = REFUSALS[case]
    task = example_copy(tmp_path)
    if text is None:
        (task / relative).unlink()
    else:
        (task / relative).write_text(text)
    with pytest.raises(TaskRefused) as refused:
        imported_row(task, "x")
    assert str(refused.value).startswith(reason) or reason in str(refused.value), str(refused.value)


def test_a_solution_that_fails_its_tests_or_tests_that_pass_untouched_are_refused(tmp_path):
    wrong = example_copy(tmp_path / "wrong")
    (wrong / "solution/solve.sh").write_text("grep -c error server.log > error_count.txt\n")  # the wrong case
    with pytest.raises(TaskRefused, match=r"reference solution \(solution/solve.sh\) does not pass its tests: .*"
                                          r"error_count.txt: wanted 4"):
        imported_row(wrong, "x")
    lax = example_copy(tmp_path / "lax")
    (lax / "tests/test.sh").write_text("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(TaskRefused, match="its tests pass on the untouched environment"):
        imported_row(lax, "x")


def test_a_partial_reward_json_is_a_failure_and_an_empty_environment_is_a_task(tmp_path):
    hello = example_copy(tmp_path / "hello")
    (hello / "environment/server.log").unlink()  # nothing but the Dockerfile: the workspace starts empty
    (hello / "instruction.md").write_text("Write `hello` to hello.txt.\n")
    (hello / "solution/solve.sh").write_text("echo hello > hello.txt\n")
    (hello / "tests/test.sh").write_text(
        "mkdir -p /logs/verifier\n"
        "if [ \"$(cat hello.txt)\" = hello ]; then echo '{\"reward\": 1.0, \"style\": 0.5}' > /logs/verifier/reward.json;"
        " else echo '{\"reward\": 0.5}' > /logs/verifier/reward.json; fi\n")
    row = imported_row(hello, "x")  # reward.json's `reward` decides: 1.0 after the solution, 0.5 (a failure) before
    assert json.loads(row["metadata_json"])["files"] == {}


def test_a_link_in_a_task_is_refused_and_never_followed(tmp_path):
    task = example_copy(tmp_path)
    (task / "environment/hostname").symlink_to("/etc/hostname")  # would put this machine's file in the dataset
    with pytest.raises(TaskRefused, match="environment/hostname is a symbolic link"):
        imported_row(task, "x")


def test_a_test_may_import_the_tasks_own_code(tmp_path):
    task = example_copy(tmp_path)
    (task / "environment/count.py").write_text("def errors(path):\n    return sum('ERROR' in line for line in open(path))\n")
    (task / "tests/test_count.py").write_text("from count import errors\n")  # the workspace's module, not the host's
    assert imported_row(task, "x")["id"] == "count-error-lines"


def test_a_spec_imports_harbor_tasks_its_check_counts_them_and_agentic_evaluation_plays_them(small_store, tmp_path):
    """`data.imports: {NAME: {path: DIR, as: harbor}}`: spec check reads and checks each task (the refused one
    named), the pipeline's data step imports them, and agentic RL's evaluation plays them as terminal episodes."""
    shutil.copytree(EXAMPLES, tmp_path / "harbor")
    document = {"store": small_store["root"], "model": {"checkpoint": small_store["init"]},
                "data": {"imports": {"my-tasks": {"path": "harbor", "as": "harbor", "skip_bad_rows": True,
                                                  "test_fraction": 0.99}}},  # both to the held-out split
                "stages": {"agentic_rl": {"datasets": ["my-tasks"], "tasks": {"terminal": 1.0}}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(document))
    check = CliRunner().invoke(app, ["spec", "check", str(tmp_path / "spec.yaml")], env={"COLUMNS": "200"})
    assert check.exit_code == 0 and "spec ok" in check.output, check.output
    assert f"my-tasks: {tmp_path / 'harbor'} as harbor, 2 rows, 1 bad" in check.output
    prepared = prepare_data.fn(parse_spec(document, str(tmp_path / "spec.yaml")), tmp_path)
    (dataset,) = prepared["stages"]["agentic_rl"]
    store = open_store(small_store["root"])
    assert published_contract(store.open(dataset)) == "prompt@1"
    settings = episode_settings(EvalSettings(limit_per_suite=2, max_new_tokens=8, max_turns=2))
    metrics = evaluate_agentic(store, small_store["init"], [dataset], ["terminal"], settings, EngineSettings())
    assert "terminal/tool_success" in metrics and metrics["env_failures"] == 0
