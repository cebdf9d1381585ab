"""The swe task under real bubblewrap and over its real HTTP service: every generated bug fails its hidden tests and
its fix passes them, every reference trajectory replays to success with the tool results it recorded, a module that
forges a passing report (or returns objects equal to anything) fails, tool errors are results the model reads, and no
episode's workspace outlives it, however it ends."""

from __future__ import annotations

import gc
import json
import re
import time
from collections import Counter

import pytest

from model.tool_calls import ToolCall
from rollout.agents.envs.case_runs import passed_calls
from rollout.agents.envs.code_sandbox import SandboxLimits
from rollout.agents.envs.episode_workspaces import EpisodeWorkspaces, WorkspaceClosed
from rollout.agents.envs.swe_task import LIMITS, SweTask, hidden_tests, run_tests
from rollout.agents.envs.tasks import Episode
from suites import swe
from suites.swe_templates import FAMILIES, TEMPLATES
from tests.code_task_checks import FINAL_TURN, task_service, tool_turn
from tests.code_task_checks import replay as replay_through

EPISODES = swe.generate(40, seed=11)


pytestmark = pytest.mark.usefixtures("bubblewrap")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with task_service("swe", tmp_path_factory.mktemp("swe")) as running:
        yield running


def test_the_set_covers_every_family_and_template_and_both_error_segments():
    assert {e.repository.bug.family for e in EPISODES} == set(FAMILIES)
    assert {e.repository.template for e in EPISODES} == set(TEMPLATES)
    errors = Counter(next((m["reasoning_content"].split()[0] for m in e.messages if m.get("error")), None)
                     for e in EPISODES)
    assert errors["Maybe"] and errors["The"] and errors[None] > len(EPISODES) / 2, errors  # wrong fix, misquoted edit


def test_every_bug_fails_its_hidden_tests_and_its_fix_passes_them():
    for episode in EPISODES:
        repository = episode.repository
        buggy = repository.files[repository.path]
        fixed = buggy.replace(*repository.fix, 1)
        assert fixed == repository.module.source and buggy.count(repository.fix[0]) == 1
        # What the task reads from a row (JSON) is what the generator meant.
        path, cases = hidden_tests(json.loads(json.dumps(repository.metadata())))
        assert (path, cases) == (repository.path, repository.hidden_tests)
        module = path.removesuffix(".py")
        assert passed_calls(buggy, cases, LIMITS, module) <= len(cases.cases) - 2, episode.id  # two calls expose it
        assert passed_calls(fixed, cases, LIMITS, module) == len(cases.cases), episode.id


def test_every_reference_trajectory_succeeds_through_the_service(service):
    for episode in EPISODES:
        repository = episode.repository
        results, verdict = replay_through(service, episode.id, episode.messages, repository.reference,
                                          repository.metadata())
        # The tool results are those the trajectory recorded (suites.swe ran the same tools in memory).
        assert results == [m["content"] for m in episode.messages if m["role"] == "tool"], episode.id
        assert verdict["reward"] == 1.0, episode.id
    assert service.workspaces() == []  # each verify removed its episode's workspace


def test_an_unfixed_repository_fails_and_tool_errors_are_results_to_read(service):
    episode = EPISODES[0]
    repository = episode.repository
    service.call("/reset", episode_id="errors", messages=list(episode.messages[:1]), reference=repository.reference,
                 metadata=repository.metadata())
    path = repository.path
    turns = {
        "absent": tool_turn("edit_file", path=path, old="no such text", new="x"),
        "repeated": tool_turn("edit_file", path=path, old="\n", new="\n\n"),
        "empty": tool_turn("edit_file", path=path, old="", new="x"),
        "parent": tool_turn("read_file", path="../secret.py"),
        "absolute": tool_turn("read_file", path="/etc/passwd"),
        "missing": tool_turn("read_file", path="nothing.py"),
        "folder": tool_turn("read_file", path="tests"),
        "unknown": tool_turn("delete_file", path=path),
        "arguments": tool_turn("read_file", file=path),
    }
    results = {name: service.call("/step", episode_id="errors", text=text)["tool_results"][0]
               for name, text in turns.items()}
    lines = repository.files[path].count("\n")
    assert results == {
        "absent": f"Error: the old text does not occur in {path}; nothing was changed. Copy it exactly from "
                  "read_file, indentation included.",
        "repeated": f"Error: the old text occurs {lines} times in {path}; nothing was changed. Include more of the "
                    "surrounding lines so that it occurs once.",
        "empty": "Error: old is empty; give the exact text to replace.",
        "parent": "Error: '../secret.py' is outside the repository.",
        "absolute": "Error: '/etc/passwd' is outside the repository.",
        "missing": "Error: there is no file 'nothing.py'; list_files shows the files.",
        "folder": "Error: 'tests' is not a regular file.",
        "unknown": "Error: unknown tool 'delete_file'; the tools are list_files, read_file, edit_file, run_tests.",
        "arguments": "Error: read_file takes exactly the arguments 'path'.",
    }
    # Nothing was changed by the failed edits: the tests still fail, and the episode, ended unfixed, fails.
    assert "1 failed" in service.call("/step", episode_id="errors", text=tool_turn("run_tests"))["tool_results"][0]
    assert service.call("/step", episode_id="errors", text=FINAL_TURN)["done"]
    assert service.call("/verify", episode_id="errors")["reward"] == 0.0
    assert service.workspaces() == []


def test_a_runaway_test_run_is_cut_and_its_limit_named():
    repository = EPISODES[0].repository
    task = SweTask(SandboxLimits(cpu_s=1, wall_s=5))
    episode = Episode(repository.reference, repository.metadata())
    looping = f"while True:\n    pass\n{repository.files[repository.path]}"
    task.workspaces.workspace(episode, lambda: {**repository.files, repository.path: looping})
    result = task.execute(ToolCall("run_tests", {}), episode)
    assert result.endswith("[sandbox limits acted: cpu_time]"), result
    assert not task.succeeded(episode)
    task.end_episode(episode)


def report_reads_passed(source: str, repository: swe.BuggyRepository) -> tuple[bool, bool]:
    """With `source` as the repository's module: whether the visible tests' run reads as all passed (exit code 0 and a
    last line "N passed", what once counted as success), and whether the episode succeeds."""
    task = SweTask()
    episode = Episode(repository.reference, repository.metadata())
    workspace = task.workspaces.workspace(episode, lambda: {**repository.files, repository.path: source})
    try:
        result = run_tests(workspace)
        last = result.output.rstrip("\n").rsplit("\n", 1)[-1]
        return result.exit_code == 0 and re.fullmatch(r"\d+ passed", last) is not None, task.succeeded(episode)
    finally:
        task.end_episode(episode)


def test_a_module_that_forges_a_passing_run_fails():
    repository = EPISODES[0].repository
    buggy, function = repository.files[repository.path], repository.module.function
    # Each keeps the bug, so only its forgery could pass; True where it does forge the visible tests' report.
    forgeries = {
        "prints the summary and exits 0 at import": (
            "import os, sys\nsys.__stdout__.write('40 passed\\n')\nsys.__stdout__.flush()\nos._exit(0)\n" + buggy, True),
        "prints the summary and raises SystemExit(0) at import": (
            "import sys\nprint('40 passed')\nsys.exit(0)\n" + buggy, False),
        "replaces the runners' functions": (
            "import atexit, json, os, sys\n_runner = sys.modules['__main__']\n"
            "_runner._summary = lambda counts: '40 passed'\n"  # the visible tests' runner
            "_runner.returned_values = lambda *arguments: ['true'] * 100\n"  # the hidden calls' runner
            "json.dumps = lambda *arguments, **options: 'true'\n"
            "json.dump = lambda value, file, **options: file.write('[\"true\"]')\n"
            "atexit.register(lambda: (sys.stdout.flush(), os._exit(0)))\n" + buggy, True),  # whatever the status
        "returns an object equal to anything": (
            f"{buggy}\n\nclass Anything:\n    def __eq__(self, other):\n        return True\n\n\n"
            f"def {function}(*arguments, **options):\n    return Anything()\n", True),
        "returns an int equal to anything": (
            f"{buggy}\n\nclass Anything(int):\n    __hash__ = int.__hash__\n\n    def __eq__(self, other):\n"
            f"        return True\n\n\ndef {function}(*arguments, **options):\n    return Anything(0)\n", True),
        "writes a fake results file and exits": (
            "import json, os\ncalls = json.load(open('calls.json')) if os.path.exists('calls.json') else None\n"
            "with open('results.json', 'w') as results:\n"
            "    json.dump(['true'] * len(calls['arguments'] if calls else range(100)), results)\n"
            "os._exit(0)\n" + buggy, False),
        "exits 0 inside the function": (
            f"{buggy}\n\nimport sys\n\n\ndef {function}(*arguments, **options):\n    print('40 passed')\n"
            "    sys.exit(0)\n", False),
        "ends the process with 0 inside the function": (
            f"{buggy}\n\nimport os, sys\n\n\ndef {function}(*arguments, **options):\n"
            "    sys.__stdout__.write('40 passed\\n')\n    sys.__stdout__.flush()\n    os._exit(0)\n", True),
    }
    outcomes = {name: report_reads_passed(source, repository) for name, (source, _) in forgeries.items()}
    assert outcomes == {name: (forges, False) for name, (_, forges) in forgeries.items()}


def test_a_real_fix_succeeds_whatever_it_prints_or_writes():
    repository = EPISODES[0].repository
    fixed, function = repository.files[repository.path].replace(*repository.fix, 1), repository.module.function
    noisy = (f"import sys\nprint('0 passed, 40 failed')\nopen('results.json', 'w').write('[]')\n{fixed}\n"
             f"_fixed = {function}\n\n\ndef {function}(*arguments, **options):\n    print('1 failed')\n"
             f"    sys.stderr.write('error\\n')\n    return _fixed(*arguments, **options)\n")
    assert report_reads_passed(noisy, repository) == (True, True)


def test_a_row_without_its_module_or_hidden_calls_is_refused():
    metadata = EPISODES[0].repository.metadata()
    SweTask().check_row("", metadata)
    old_style = {"tests/test_hidden.py": "def test_x():\n    assert True\n"}  # test files: their report could be forged
    for changed, field in [({"hidden_tests": old_style}, "hidden_tests"), ({"hidden_tests": None}, "hidden_tests"),
                           ({"module": "missing.py"}, "module"), ({"module": "tests/test_x.py"}, "module")]:
        with pytest.raises(ValueError, match=f"metadata.{field}"):
            SweTask().check_row("", {**metadata, **changed})


def test_workspaces_end_with_verify_abandon_idleness_and_shutdown(tmp_path):
    repository = EPISODES[0].repository
    prompt = list(EPISODES[0].messages[:1])

    def start(service, episode_id):
        service.call("/reset", episode_id=episode_id, messages=prompt, reference=repository.reference,
                     metadata=repository.metadata())
        service.call("/step", episode_id=episode_id, text=tool_turn("list_files"))  # opens its workspace

    with task_service("swe", tmp_path, "--idle-ttl-s", "3") as service:
        start(service, "verified")
        start(service, "abandoned")
        assert len(service.workspaces()) == 2
        service.call("/step", episode_id="verified", text=FINAL_TURN)
        service.call("/verify", episode_id="verified")
        service.call("/abandon", episode_id="abandoned")
        assert service.workspaces() == []
        start(service, "idle")
        time.sleep(3.5)
        start(service, "running")  # a reset forgets the idle ones
        assert len(service.workspaces()) == 1
        assert service.post("/step", episode_id="idle", text=tool_turn("list_files")).status_code == 404
    assert service.workspaces() == []  # the running one went with the service's shutdown


def test_past_capacity_the_least_recently_used_workspace_closes_and_a_dropped_episode_takes_its_own():
    workspaces = EpisodeWorkspaces(LIMITS, capacity=2)
    first, second, third = (Episode("", {}) for _ in range(3))
    opened = {name: workspaces.workspace(episode, lambda: {"a.txt": "a"})
              for name, episode in (("first", first), ("second", second))}
    workspaces.workspace(first, dict)  # used again: now the second is the least recently used
    opened["third"] = workspaces.workspace(third, lambda: {"a.txt": "a"})
    assert not opened["second"].path.exists() and opened["first"].path.exists()
    with pytest.raises(WorkspaceClosed, match="more than 2 workspaces were open"):
        workspaces.workspace(second, dict)  # no fresh copy that would undo the episode's work
    del first
    gc.collect()
    assert not opened["first"].path.exists() and workspaces.open_count() == 1
    workspaces.close(third)
    assert not opened["third"].path.exists() and workspaces.open_count() == 0
