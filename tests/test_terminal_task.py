"""The terminal task under real bubblewrap and over its real HTTP service: every generated checker fails on the
untouched folder and passes after the reference solution, every reference trajectory replays to success with the
tool results it recorded, command failures and sandbox limits read as results, and workspaces end with episodes."""

from __future__ import annotations

from collections import Counter

import pytest

from rollout.agents.envs.code_sandbox import open_workspace
from rollout.agents.envs.terminal_task import LIMITS
from suites import terminal
from tests.code_task_checks import FINAL_TURN, task_service, tool_turn
from tests.code_task_checks import replay as replay_through

EPISODES = terminal.generate(36, seed=5, error_rate=0.5)


pytestmark = pytest.mark.usefixtures("bubblewrap")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with task_service("terminal", tmp_path_factory.mktemp("terminal")) as running:
        yield running


def test_the_set_covers_every_family_with_and_without_an_error_segment():
    kinds = Counter((e.problem.family, any(m.get("error") for m in e.messages)) for e in EPISODES)
    assert {family for family, _ in kinds} == set(terminal.FAMILIES)
    assert sum(count for (_, erred), count in kinds.items() if erred) >= len(EPISODES) / 4, kinds


def test_every_checker_fails_before_and_passes_after_the_reference_solution():
    for episode in EPISODES:
        problem = episode.problem
        with open_workspace(problem.files, LIMITS) as workspace:  # one sandbox command a problem
            result = workspace.run(f"( {problem.check} ) 2>/dev/null && echo CHECK-PASSED-BEFORE\n"
                                   f"( {problem.solution}\n) && ( {problem.check} ) && echo CHECK-PASSED-AFTER")
        assert result.output == "CHECK-PASSED-AFTER\n", (episode.id, problem.solution, result.output)


def test_a_script_that_prints_a_fixed_answer_fails_its_checker():
    problem = next(e.problem for e in EPISODES if e.problem.family == "write_script")
    script = problem.solution.split()[2]
    answer = problem.steps[-1].output.strip()
    with open_workspace(problem.files, LIMITS) as workspace:
        workspace.run(f"printf '#!/bin/sh\\necho {answer}\\n' > {script} && chmod +x {script}")
        assert workspace.run(f"./{script}").output == f"{answer}\n"
        assert workspace.run(problem.check).exit_code != 0


def test_a_large_draw_keeps_every_distinct_words_input_unsorted_with_no_neighbours_alike():
    # 400 at seed 0 once hung: a word drawn so often that no order kept its copies apart was shuffled forever.
    problems = [e.problem for e in terminal.generate(400, seed=0) if e.problem.family == "distinct_words"]
    for problem in problems:
        [words] = [text.split() for text in problem.files.values()]
        assert words != sorted(words) and all(a != b for a, b in zip(words, words[1:], strict=False)), words


def test_every_reference_trajectory_succeeds_through_the_service(service):
    for episode in EPISODES:
        results, verdict = replay_through(service, episode.id, episode.messages, episode.problem.solution,
                                          episode.metadata())
        # The recorded results, worked out by the suite, are what the commands print in the sandbox.
        assert results == [m["content"] for m in episode.messages if m["role"] == "tool"], episode.id
        assert verdict["reward"] == 1.0, episode.id
    assert service.workspaces() == []  # each verify removed its episode's workspace


def test_failures_and_limits_are_results_to_read_and_an_undone_task_fails(service):
    episode = EPISODES[0]
    service.call("/reset", episode_id="errors", messages=list(episode.messages[:1]), reference=episode.problem.solution,
                 metadata=episode.metadata())
    turns = {
        "missing": tool_turn("bash", command="cat no-such-file"),
        "outside": tool_turn("bash", command="echo x > /etc/escaped"),
        "long": tool_turn("bash", command="seq 100000"),
        "unknown": tool_turn("python", code="print(1)"),
        "arguments": tool_turn("bash", cmd="ls"),
    }
    results = {name: service.call("/step", episode_id="errors", text=text)["tool_results"][0]
               for name, text in turns.items()}
    assert results["missing"] == "cat: no-such-file: No such file or directory\n[exit code 1]"
    assert results["outside"].endswith("Read-only file system\n[exit code 1]"), results["outside"]
    assert results["long"].startswith("1\n2\n3\n") and "bytes of output cut" in results["long"]
    assert results["long"].endswith("99999\n100000\n[sandbox limits acted: output_truncated]"), results["long"][-80:]
    assert results["unknown"] == "Error: unknown tool 'python'; the tools are bash."
    assert results["arguments"] == "Error: bash takes exactly the arguments 'command'."
    assert service.call("/step", episode_id="errors", text=FINAL_TURN)["done"]
    assert service.call("/verify", episode_id="errors")["reward"] == 0.0  # the chore was never done
    assert service.workspaces() == []


def test_an_abandoned_episode_takes_its_workspace_with_it(service):
    episode = EPISODES[0]
    service.call("/reset", episode_id="left", messages=list(episode.messages[:1]), reference=episode.problem.solution,
                 metadata=episode.metadata())
    service.call("/step", episode_id="left", text=tool_turn("bash", command="touch made-here"))
    (workspace,) = service.workspaces()
    assert (workspace / "made-here").exists()
    service.call("/abandon", episode_id="left")
    assert service.workspaces() == []


def test_a_row_without_files_or_check_is_refused_naming_the_field(service):
    prompt = list(EPISODES[0].messages[:1])
    for metadata, field in [({"check": "true"}, "metadata.files"), ({"files": {"../x": ""}, "check": "true"},
                                                                    "metadata.files"),
                            ({"files": {"a.txt": "a"}}, "metadata.check")]:
        response = service.post("/reset", episode_id="bad", messages=prompt, reference="", metadata=metadata)
        assert response.status_code == 422 and field in response.text, response.text
