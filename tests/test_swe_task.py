"""The swe task under real bubblewrap and over its real HTTP service: every generated bug fails its hidden tests and
its fix passes them, every reference trajectory replays to success with the tool results it recorded, tool errors
are results the model reads, and no episode's workspace outlives it, however it ends."""

from __future__ import annotations

import gc
import json
import shlex
import time
from collections import Counter

import pytest

from model.tool_calls import ToolCall
from rollout.agents.envs.code_sandbox import SandboxLimits, open_workspace
from rollout.agents.envs.episode_workspaces import EpisodeWorkspaces, WorkspaceClosed
from rollout.agents.envs.swe_task import LIMITS, RUNNER, SweTask
from rollout.agents.envs.tasks import Episode
from suites import swe
from suites.swe_templates import FAMILIES, TEMPLATES
from tests.code_task_checks import FINAL_TURN, task_service, tool_turn
from tests.code_task_checks import replay as replay_through
from tests.system_packages import ensure_debian_packages

EPISODES = swe.generate(40, seed=11)


@pytest.fixture(scope="module", autouse=True)
def bubblewrap():
    ensure_debian_packages("bubblewrap", "util-linux", commands=("bwrap", "setpriv", "prlimit"))


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
        run = shlex.join(["python", "-I", "-S", "-B", "-c", RUNNER, json.dumps({"tests": repository.hidden_tests})])
        # One sandbox command a repository: the hidden tests on the bug, then on the fix.
        with open_workspace({**repository.files, "fixed.txt": fixed}, LIMITS) as workspace:
            result = workspace.run(f'{run}; echo "[buggy: $?]"; cp fixed.txt {repository.path} && {run}; '
                                   'echo "[fixed: $?]"')
        before, after = result.output.split("[buggy: ")
        status, fixed_report = after.split("]\n", 1)
        hidden = repository.hidden_tests[next(iter(repository.hidden_tests))].count("def test_")
        assert status == "1" and "failed" in before.splitlines()[-1], (episode.id, result.output)
        assert fixed_report == fixed_report.split("[fixed")[0] + "[fixed: 0]\n", (episode.id, result.output)
        assert fixed_report.splitlines()[-2] == f"{hidden} passed", (episode.id, result.output)

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
