"""`swe`: fix the bug of a small repository with file and test tools, in the episode's sandboxed workspace.

The row's metadata holds the repository (`files`) and its `hidden_tests` (suites/swe.py writes both). The tools are
suites/swe_tools.py's, the ones the suite's reference trajectories were recorded with, here on the episode's
workspace: files are read and edited from the host, confined to the workspace, and the tests run inside the
sandbox (suites/swe_runner.py as a script, without site-packages or bytecode files). The episode succeeds when the
hidden tests, which the model never sees, all pass in the workspace as the episode left it; the reply does not count.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from model.tool_calls import ToolCall
from rollout.agents.envs.code_sandbox import CommandResult, SandboxLimits, Workspace
from rollout.agents.envs.episode_workspaces import CAPACITY, EpisodeWorkspaces, limits_note, row_files
from rollout.agents.envs.tasks import Episode
from suites import swe_runner
from suites.swe_tools import TOOLS, execute

RUNNER = inspect.getsource(swe_runner)
# The repositories' tests take milliseconds: a run that needs seconds is a loop the model wrote. Four calls of a
# turn at the wall limit stay within the orchestrator's 60 s for one step.
LIMITS = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=1024, output_bytes=6000)
ALL_PASSED = re.compile(r"\d+ passed")  # the runner's summary when nothing failed


@dataclass
class WorkspaceRepository:
    """suites.swe_tools' Repository on a sandboxed workspace."""

    workspace: Workspace

    def paths(self) -> list[str]:
        root = self.workspace.path
        return sorted(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                      for folder, _, names in os.walk(root) for name in names)

    def read(self, path: str) -> str:
        return self.workspace.read(path)  # refuses what resolves outside the workspace or is no regular file

    def write(self, path: str, text: str) -> None:
        self.workspace.write(path, text)

    def run_tests(self) -> str:
        result = run_tests(self.workspace)
        return result.output + limits_note(result.contained)


def run_tests(workspace: Workspace, tests: Mapping[str, str] | None = None) -> CommandResult:
    """The workspace's own tests, or `tests` (path -> text) instead, run by suites.swe_runner in the sandbox."""
    request = [json.dumps({"tests": dict(tests)})] if tests else []
    return workspace.run(["python", "-I", "-S", "-B", "-c", RUNNER, *request])


class SweTask:
    name, tools = "swe", TOOLS

    def __init__(self, limits: SandboxLimits = LIMITS, max_workspaces: int = CAPACITY):
        self.workspaces = EpisodeWorkspaces(limits, max_workspaces)

    def check_row(self, reference: str, metadata: Mapping) -> None:
        row_files(metadata, "files")
        row_files(metadata, "hidden_tests")

    def execute(self, call: ToolCall, episode: Episode) -> str:
        return execute(call, WorkspaceRepository(self._workspace(episode)))

    def succeeded(self, episode: Episode) -> bool:
        result = run_tests(self._workspace(episode), row_files(episode.metadata, "hidden_tests"))
        summary = result.output.rstrip("\n").rsplit("\n", 1)[-1]
        return result.exit_code == 0 and not result.contained and ALL_PASSED.fullmatch(summary) is not None

    def end_episode(self, episode: Episode) -> None:
        self.workspaces.close(episode)

    def _workspace(self, episode: Episode) -> Workspace:
        return self.workspaces.workspace(episode, lambda: row_files(episode.metadata, "files"))
