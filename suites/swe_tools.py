"""What the swe suite's tools do to a repository, for a model's tool call.

The swe task runs them on an episode's sandboxed workspace (rollout/agents/envs/swe_task.py), the suite's generator
on the repository's files in memory (`InMemoryRepository`), so the reference trajectories record exactly what the
task answers. Both go through `execute`: the argument checks, the edit's exact-string rule and every error message
are written once. An error is a result the model reads, never an exception.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Protocol

from model.tool_calls import ToolCall
from suites.swe_runner import discover, report
from suites.tool_use import argument_error

READ_CHARACTERS = 8000  # of a file read_file shows: a file the tests wrote could be huge


def _tool(name: str, description: str, **parameters: str) -> dict:
    properties = {parameter: {"type": "string", "description": text} for parameter, text in parameters.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(parameters)}}}


TOOLS = [
    _tool("list_files", "List the repository's files."),
    _tool("read_file", "Show a file of the repository.", path="the file's path, relative to the repository"),
    _tool("edit_file", "Replace one exact occurrence of old with new in a file.",
          path="the file's path, relative to the repository",
          old="the exact text to replace, indentation included; it must occur exactly once",
          new="the text to put in its place"),
    _tool("run_tests", "Run the repository's tests (tests/test_*.py) and report each test."),
]


class Repository(Protocol):
    def paths(self) -> list[str]:
        """Every file, as a path relative to the repository, in order."""

    def read(self, path: str) -> str:
        """The file's text; FileNotFoundError when there is none, ValueError saying why it cannot be read."""

    def write(self, path: str, text: str) -> None: ...

    def run_tests(self) -> str:
        """The test report (suites.swe_runner), with a note of any sandbox limit that acted."""


@dataclass
class InMemoryRepository:
    """A repository as a dict of files, its tests run in this process: the suite's generator's."""

    files: dict[str, str]

    def paths(self) -> list[str]:
        return sorted(self.files)

    def read(self, path: str) -> str:
        if path not in self.files:
            if any(name.startswith(path + "/") for name in self.files):
                raise ValueError(f"'{path}' is not a regular file")
            raise FileNotFoundError(path)
        return self.files[path]

    def write(self, path: str, text: str) -> None:
        self.files[path] = text

    def run_tests(self) -> str:
        return report(self.files, discover(list(self.files)))[0]


def execute(call: ToolCall, repository: Repository) -> str:
    """The tool's result for the model, or an error it can read and recover from."""
    if error := argument_error(call, TOOLS):
        return error
    if call.name == "list_files":
        return "\n".join(repository.paths()) or "(no files)"
    if call.name == "run_tests":
        return repository.run_tests()
    given = call.arguments["path"]
    path = posixpath.normpath(given)
    if posixpath.isabs(path) or path == ".." or path.startswith("../"):
        return f"Error: '{given}' is outside the repository."
    try:
        text = repository.read(path)
    except FileNotFoundError:
        return f"Error: there is no file '{given}'; list_files shows the files."
    except ValueError as error:
        return f"Error: {error}."
    if call.name == "read_file":
        return _shown(text)
    return _edit(repository, path, text, call.arguments["old"], call.arguments["new"])


def _shown(text: str) -> str:
    if not text:
        return "(empty file)"
    if len(text) > READ_CHARACTERS:
        return text[:READ_CHARACTERS] + f"\n[... {len(text) - READ_CHARACTERS} more characters not shown ...]"
    return text


def _edit(repository: Repository, path: str, text: str, old: str, new: str) -> str:
    if not old:
        return "Error: old is empty; give the exact text to replace."
    occurrences = text.count(old)
    if occurrences == 0:
        return (f"Error: the old text does not occur in {path}; nothing was changed. "
                "Copy it exactly from read_file, indentation included.")
    if occurrences > 1:
        return (f"Error: the old text occurs {occurrences} times in {path}; nothing was changed. "
                "Include more of the surrounding lines so that it occurs once.")
    repository.write(path, text.replace(old, new, 1))
    return f"Edited {path}."
