"""A folder of Harbor tasks, read: each task's instruction, starting files, Dockerfile, tests and reference solution,
or a refusal naming the task and the file or field that is missing or wrong.

Harbor's task format (https://harborframework.com/docs/tasks, the layout `harbor tasks init` writes; Terminal-Bench
2 and the RL trainers that read it share it): a task is a folder holding
  task.toml          metadata ([metadata] author, difficulty, category, tags) and config ([verifier] timeout_sec,
                     [agent] timeout_sec, [environment] build_timeout_sec, cpus, memory_mb, allow_internet, ...)
  instruction.md     what the agent is asked
  environment/       the Dockerfile and its build context: the files the environment starts with
  tests/test.sh      the verifier (data_prep/harbor_rows.py says how it runs and what it writes)
  solution/solve.sh  the reference solution (optional to Harbor; required here, where a task is imported only
                     once its solution has passed its tests)
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from data_contracts.regular_files import NotARegularFile, read_regular_file

# What one task's files may hold in all: what a terminal task's workspace takes (episode_workspaces.row_files).
MAX_TASK_BYTES = 4_000_000
# Build files of the image, not files the environment starts with.
BUILD_FILES = {"Dockerfile", ".dockerignore"}


class TaskRefused(ValueError):
    """A task that is not imported; the message says why, naming the file or field."""


@dataclass(frozen=True)
class HarborTask:
    name: str  # the task's folder name: its row's id
    instruction: str
    files: dict[str, str]  # environment/ without its build files: the workspace, relative path -> text
    dockerfile: str  # recorded, not built
    tests: dict[str, str]  # tests/, relative path -> text; test.sh among them
    solution: str  # solution/solve.sh
    config: dict  # task.toml as parsed


def task_folders(root: Path) -> list[Path]:
    """The tasks under `root`: `root` itself when it is one task (it has a task.toml), else its sub-folders, by name
    (hidden ones passed over: `.git` is no task)."""
    if (root / "task.toml").exists():
        return [root]
    return sorted(path for path in root.iterdir() if path.is_dir() and not path.name.startswith("."))


def read_task(folder: Path) -> HarborTask:
    """The task in `folder`, or TaskRefused naming what is missing or unreadable."""
    config = _config(folder)
    instruction = _text_file(folder, "instruction.md")
    if not instruction.strip():
        raise TaskRefused("instruction.md is empty: it is what the agent is asked")
    environment = _tree(folder, "environment")
    if "docker-compose.yaml" in environment or "docker-compose.yml" in environment:
        raise TaskRefused("environment/docker-compose.yaml: a task of several containers; the sandbox is one")
    if "Dockerfile" not in environment:
        raise TaskRefused("no environment/Dockerfile: a task's environment is defined by one")
    tests = _tree(folder, "tests")
    if "test.sh" not in tests:
        raise TaskRefused("no tests/test.sh: the verifier a task is graded by")
    solution = _tree(folder, "solution")
    if "solve.sh" not in solution:
        raise TaskRefused("no solution/solve.sh: a task is imported only once its reference solution passes its tests")
    if extra := sorted(set(solution) - {"solve.sh"}):
        raise TaskRefused(f"solution/ holds {', '.join(extra)} besides solve.sh: the reference is one bash script")
    files = {path: text for path, text in environment.items() if path not in BUILD_FILES}
    if (size := sum(len(text.encode()) for text in [*files.values(), *tests.values(), instruction])) > MAX_TASK_BYTES:
        raise TaskRefused(f"{size:,} bytes of files, more than the {MAX_TASK_BYTES:,} a task's workspace takes")
    return HarborTask(folder.name, instruction.strip(), files, environment["Dockerfile"], tests, solution["solve.sh"],
                      config)


def _config(folder: Path) -> dict:
    """task.toml, parsed; the fields this import reads are checked for their type."""
    try:
        config = tomllib.loads(_text_file(folder, "task.toml"))
    except tomllib.TOMLDecodeError as error:
        raise TaskRefused(f"task.toml: not TOML this can read ({error})") from None
    for section in ("metadata", "verifier", "agent", "environment"):
        if not isinstance(config.get(section, {}), dict):
            raise TaskRefused(f"task.toml: [{section}] must be a table")
    for section, key in (("verifier", "timeout_sec"), ("agent", "timeout_sec"), ("environment", "gpus")):
        value = config.get(section, {}).get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TaskRefused(f"task.toml: {section}.{key} must be a number, got {value!r}")
    return config


def _text_file(folder: Path, relative: str) -> str:
    path = folder / relative
    if not path.exists() and not path.is_symlink():
        raise TaskRefused(f"no {relative}")
    return _read_text(path, relative)


def _tree(folder: Path, part: str) -> dict[str, str]:
    """Every file under folder/part (relative path -> text); {} when there is no such folder."""
    root = folder / part
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise TaskRefused(f"{part}/ must be a folder (not a link or a file)")
    files = {}
    for here, dirs, names in os.walk(root):  # os.walk does not follow links to folders: they are named below
        dirs.sort()
        for name in sorted(dirs) + sorted(names):
            path = Path(here) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                raise TaskRefused(f"{part}/{relative} is a symbolic link: a task's files are read as they are, "
                                  "never through a link (it could point anywhere on this machine)")
            if name in names:
                files[relative] = _read_text(path, f"{part}/{relative}")
    return files


def _read_text(path: Path, relative: str) -> str:
    if path.is_symlink():
        raise TaskRefused(f"{relative} is a symbolic link: a task's files are read as they are, never through a link")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise TaskRefused(f"{relative} is not a regular file")
        data = read_regular_file(path, MAX_TASK_BYTES)
    except NotARegularFile as error:
        raise TaskRefused(f"{relative}: {str(error).split(': ', 1)[-1]}") from None
    except OSError as error:
        raise TaskRefused(f"{relative}: cannot be read ({error.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TaskRefused(f"{relative} is not UTF-8 text (byte {error.start}): a task's files are text") from None
