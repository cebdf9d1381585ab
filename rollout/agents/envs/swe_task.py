"""`swe`: fix the bug of a small repository with file and test tools, in the episode's sandboxed workspace.

The row's metadata holds the repository (`files`), the path of its `module` and its `hidden_tests` (suites/swe.py
writes them). The tools are suites/swe_tools.py's, the ones the suite's reference trajectories were recorded with,
here on the episode's workspace: files are read and edited from the host, confined to the workspace, and the tests
run inside the sandbox (suites/swe_runner.py as a script, without site-packages or bytecode files); what they report
is for the model to read, it decides nothing.

The episode succeeds when the module, as the episode left it, answers every hidden call (which the model never sees)
with exactly the expected value; the reply does not count. The module runs on the calls' arguments in a fresh
sandbox of its own (rollout/agents/envs/case_runs.py, the code verifier's runner), which writes back only the
returned values; they are compared here, by their canonical JSON. So nothing the module prints, how it exits, what it
does to the runner or what its return values claim to equal can pass a call it does not answer right.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass

from model.tool_calls import ToolCall
from rollout.agents.envs.case_runs import RUNNER_FILES, passed_calls
from rollout.agents.envs.code_sandbox import CommandResult, SandboxLimits, Workspace
from rollout.agents.envs.episode_workspaces import CAPACITY, EpisodeWorkspaces, limits_note, row_files
from rollout.agents.envs.tasks import Episode
from suites import swe_runner
from suites.code_cases import FunctionCases
from suites.swe_tools import TOOLS, execute

RUNNER = inspect.getsource(swe_runner)
# The repositories' tests take milliseconds: a run that needs seconds is a loop the model wrote. Four calls of a
# turn at the wall limit stay within the orchestrator's 60 s for one step.
LIMITS = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=1024, output_bytes=6000)


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


def run_tests(workspace: Workspace) -> CommandResult:
    """The workspace's own tests, run by suites.swe_runner in the sandbox."""
    return workspace.run(["python", "-I", "-S", "-B", "-c", RUNNER])


def hidden_tests(metadata: Mapping) -> tuple[str, FunctionCases]:
    """The path of the row's module and its hidden calls, checked as `check_row` does: ValueError names the field."""
    files = row_files(metadata, "files")
    path = metadata.get("module")
    if not (isinstance(path, str) and path in files and path.endswith(".py") and path[:-3].isidentifier()
            and path not in RUNNER_FILES):
        raise ValueError(f"metadata.module: {path!r} is not one of the row's files, a top-level NAME.py module")
    cases = FunctionCases.from_data(metadata.get("hidden_tests"))
    if cases is None:
        raise ValueError('metadata.hidden_tests: an swe row needs its hidden calls as {"function": NAME, "cases": '
                         '[{"arguments": [...], "returns": VALUE}, ...]}')
    return path, cases


class SweTask:
    name, tools = "swe", TOOLS

    def __init__(self, limits: SandboxLimits = LIMITS, max_workspaces: int = CAPACITY):
        self.limits = limits  # the episode's commands' and its check's
        self.workspaces = EpisodeWorkspaces(limits, max_workspaces)

    def check_row(self, reference: str, metadata: Mapping) -> None:
        hidden_tests(metadata)

    def execute(self, call: ToolCall, episode: Episode) -> str:
        return execute(call, WorkspaceRepository(self._workspace(episode)))

    def succeeded(self, episode: Episode) -> bool:
        path, cases = hidden_tests(episode.metadata)
        try:
            source = self._workspace(episode).read(path)
        except (OSError, ValueError):  # removed, made a link out of the workspace or no regular file, not text
            return False
        return passed_calls(source, cases, self.limits, path[:-3]) == len(cases.cases)

    def end_episode(self, episode: Episode) -> None:
        self.workspaces.close(episode)

    def _workspace(self, episode: Episode) -> Workspace:
        return self.workspaces.workspace(episode, lambda: row_files(episode.metadata, "files"))
