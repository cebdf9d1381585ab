"""`terminal`: file and text chores done with one `bash` tool, in the episode's sandboxed workspace.

The row's metadata holds the folder's `files` and its `check`, a bash command (suites/terminal.py writes both).
Each `bash` call runs in the sandbox and answers what it printed and its exit code, as the suite's reference
trajectories show it (`shell_result`), with a note of any sandbox limit that acted. The episode succeeds when the
check, run in the workspace as the episode left it, exits 0; the reply does not count.

The folder may start empty (a chore that makes its files from nothing). A check may carry hidden files of its own:
every sandbox command gets a fresh private /tmp, so what a check writes there no episode command ever sees
(an imported Harbor task's tests run that way: data_prep/harbor_rows.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from model.tool_calls import ToolCall
from rollout.agents.envs.code_sandbox import SandboxLimits, Workspace
from rollout.agents.envs.episode_workspaces import CAPACITY, EpisodeWorkspaces, limits_note, row_files
from rollout.agents.envs.tasks import Episode
from suites.terminal import TOOLS, shell_result
from suites.tool_use import argument_error

# The chores take milliseconds; four calls of a turn at the wall limit stay within the orchestrator's 60 s a step.
LIMITS = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=1024, output_bytes=6000)


class TerminalTask:
    name, tools = "terminal", TOOLS

    def __init__(self, limits: SandboxLimits = LIMITS, max_workspaces: int = CAPACITY):
        self.workspaces = EpisodeWorkspaces(limits, max_workspaces)

    def check_row(self, reference: str, metadata: Mapping) -> None:
        row_files(metadata, allow_empty=True)
        if not isinstance(metadata.get("check"), str) or not metadata["check"].strip():
            raise ValueError("metadata.check: a terminal row needs the bash command that checks the episode's result")

    def execute(self, call: ToolCall, episode: Episode) -> str:
        if error := argument_error(call, TOOLS):
            return error
        result = self._workspace(episode).run(call.arguments["command"])
        return shell_result(result.output, result.exit_code) + limits_note(result.contained)

    def succeeded(self, episode: Episode) -> bool:
        return self._workspace(episode).run(episode.metadata["check"]).exit_code == 0

    def end_episode(self, episode: Episode) -> None:
        self.workspaces.close(episode)

    def _workspace(self, episode: Episode) -> Workspace:
        return self.workspaces.workspace(episode, lambda: row_files(episode.metadata, allow_empty=True))
