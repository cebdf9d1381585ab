"""What a Harbor task needs that the sandbox lacks: the reason it is refused, or None.

The terminal task runs a task's commands and its tests in the code sandbox (rollout/agents/envs/code_sandbox.py):
this machine's system, read-only, with no network. The task's Dockerfile is not built, so whatever its image
would add must be here already. Refused, each naming the file, the line and the program or package:
- a task.toml that asks for a GPU, or for a verifier image of its own;
- a script (tests/*.sh, solution/solve.sh) that installs or downloads (apt-get, pip, uv, curl, ...: no network),
  or starts a program not on the sandbox's PATH;
- a test module importing a Python module this machine's Python (the one the sandbox runs) lacks;
- a Dockerfile step that installs a package this machine lacks, downloads, or does anything else (a RUN step is
  not replayed: its effect would be missing rather than refused);
- a test or the solution using a path of the image (its WORKDIR, a COPY destination) that the sandbox does not
  have: there, the environment's files are in the working folder.
What a reading cannot see, the import's run of the task in the sandbox still catches (data_prep/harbor_import.py).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import posixpath
import re
import shutil
import subprocess
from collections.abc import Iterator

from data_prep.dockerfile import instructions
from data_prep.harbor_tasks import HarborTask
from data_prep.shell_words import simple_commands
from rollout.agents.envs.code_sandbox import INSIDE, SANDBOX_PATH

INSTALLERS = {"apt-get", "apt", "aptitude", "apk", "yum", "dnf", "pip", "pip3", "pipx", "uv", "uvx", "conda", "mamba",
              "micromamba", "npm", "npx", "yarn", "pnpm", "gem", "cargo"}
DOWNLOADERS = {"curl", "wget"}
GIT_NETWORK = {"clone", "fetch", "pull", "push", "ls-remote", "submodule"}
# Dockerfile steps with no effect on what a task's commands see (package lists, caches, the working folder).
HARMLESS_STEPS = {"rm", "mkdir", "true", ":", "set", "cd", "export"}
APT_HARMLESS = {"update", "clean", "autoclean", "autoremove"}
# pip options followed by a value, which is no package.
PIP_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix",
                     "--root", "-c", "--constraint", "--python-version", "--platform"}


def sandbox_shortfall(task: HarborTask) -> str | None:
    """Why the sandbox cannot run `task`, naming the file, line and program; None when nothing is seen missing."""
    return next(_shortfalls(task), None)


def _shortfalls(task: HarborTask) -> Iterator[str]:
    # Allowing the internet (allow_internet, network_mode) is not needing it: what the scripts run says that.
    environment = task.config.get("environment", {})
    if (environment.get("gpus") or 0) > 0:
        yield f"task.toml: environment.gpus = {environment['gpus']}, and the sandbox has no GPU"
    if task.config.get("verifier", {}).get("environment_mode") == "separate":
        yield "task.toml: verifier.environment_mode = \"separate\": its tests run in an image of their own, not built here"
    yield from _dockerfile_needs(task.dockerfile)
    scripts = {f"tests/{path}": text for path, text in task.tests.items() if path.endswith(".sh")}
    for where, text in {**scripts, "solution/solve.sh": task.solution}.items():
        yield from _script_needs(where, text)
    # A test may import its helpers and the task's own code (`from app import add`): modules of the task, not of
    # this machine.
    local = {posixpath.splitext(posixpath.basename(path))[0] for path in [*task.tests, *task.files]
             if path.endswith(".py")} | {path.split("/")[0] for path in task.files}
    for path, text in task.tests.items():
        if path.endswith(".py"):
            yield from _python_needs(f"tests/{path}", text, local)
    yield from _image_paths_used(task)


def _script_needs(where: str, text: str) -> Iterator[str]:
    try:
        commands = list(simple_commands(text))
    except ValueError as error:
        yield f"{where} cannot be read as bash ({error})"
        return
    for line, words in commands:
        program = words[0]
        if program in INSTALLERS or _runs_pip(words):
            yield f"{where} line {line} runs `{' '.join(words[:3])}`: installing needs the network, which the sandbox lacks"
        elif program in DOWNLOADERS or (program == "git" and len(words) > 1 and words[1] in GIT_NETWORK):
            yield f"{where} line {line} runs `{' '.join(words[:2])}`: the sandbox has no network"
        elif "/" not in program and "$" not in program and shutil.which(program, path=SANDBOX_PATH) is None:
            yield f"{where} line {line} runs `{program}`, which is not on the sandbox's PATH on this machine"


def _runs_pip(words: list[str]) -> bool:
    """`python -m pip ...`, `python3 -m ensurepip`: an installer behind the interpreter."""
    return words[0].startswith("python") and any(a == "-m" and b in ("pip", "ensurepip")
                                                 for a, b in zip(words, words[1:], strict=False))


def _python_needs(where: str, text: str, local: set[str]) -> Iterator[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return  # its run fails, and the import says so with the output
    for node in ast.walk(tree):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        for name in names:
            top = name.split(".")[0]
            if top not in local and importlib.util.find_spec(top) is None:
                yield (f"{where} line {node.lineno} imports `{top}`, which this machine's Python (the one the "
                       "sandbox runs) does not have")


def _dockerfile_needs(text: str) -> Iterator[str]:
    for step in instructions(text):
        where = f"environment/Dockerfile line {step.line}"
        if step.keyword in ("COPY", "ADD") and "--from" in step.argument:
            yield f"{where}: {step.keyword} --from copies out of another build stage, which is not built here"
        elif step.keyword == "ADD" and re.search(r"(^|\s)(https?://|git@)", step.argument):
            yield f"{where}: ADD downloads, and the sandbox has no network"
        elif step.keyword == "RUN":
            exec_words = step.exec_form()
            commands = [exec_words] if exec_words else [words for _, words in simple_commands(step.argument, True)]
            for words in commands:
                if problem := _run_step_problem(words):
                    yield f"{where}: {problem}"


def _run_step_problem(words: list[str]) -> str | None:
    """What a Dockerfile RUN command would add that this machine lacks, or why it cannot be left out."""
    program, rest = words[0], [w for w in words[1:] if not w.startswith("-")]
    shown = " ".join(words[:4])
    if program in ("apt-get", "apt", "apk"):
        if rest and rest[0] in ("install", "add"):
            missing = [name for name in (w.split("=")[0] for w in rest[1:]) if not _system_package_here(name)]
            return f"`{shown}` installs {', '.join(missing)}, which this machine lacks" if missing else None
        return None if rest and rest[0] in APT_HARMLESS | {"cache"} else _not_replayed(shown)
    if (pip_words := _pip_arguments(words)) is not None:
        return _pip_problem(pip_words, shown)
    if program in HARMLESS_STEPS:
        return None
    return _not_replayed(shown)


def _pip_arguments(words: list[str]) -> list[str] | None:
    """The words after `pip` in a pip command (`pip`, `pip3`, `python -m pip`, `uv pip`), else None."""
    if words[0] in ("pip", "pip3"):
        return words[1:]
    if words[0] == "uv" and words[1:2] == ["pip"]:
        return words[2:]
    if _runs_pip(words) and "pip" in words:
        return words[words.index("pip") + 1:]
    return None


def _pip_problem(words: list[str], shown: str) -> str | None:
    if not words or words[0] != "install":
        return _not_replayed(shown)
    packages, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in ("-r", "--requirement", "-e", "--editable"):
            return f"`{shown}` installs from {word} …, which this import cannot check against this machine"
        elif word.startswith("-"):
            skip = word in PIP_VALUE_OPTIONS
        else:
            packages.append(re.split(r"[\[<>=!~;@ ]", word, maxsplit=1)[0])
    missing = [name for name in packages if not _python_package_here(name)]
    return f"`{shown}` installs {', '.join(missing)}, which this machine's Python lacks" if missing else None


def _not_replayed(shown: str) -> str:
    return (f"RUN `{shown}` is not replayed: the Dockerfile is recorded, not built, so what the step does would be "
            "missing")


@functools.cache
def _system_package_here(name: str) -> bool:
    """A Debian package installed here, or a program of that name on the sandbox's PATH (`python3` from this venv)."""
    if shutil.which(name, path=SANDBOX_PATH):
        return True
    try:
        status = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name], capture_output=True, text=True,
                                timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # not a Debian machine: nothing to ask
        return False
    return status.returncode == 0 and status.stdout.startswith("ii")


@functools.cache
def _python_package_here(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _image_paths_used(task: HarborTask) -> Iterator[str]:
    """A test or the solution naming a folder the image has (WORKDIR, a COPY destination) and the sandbox does not."""
    paths = set()
    for step in instructions(task.dockerfile):
        if step.keyword == "WORKDIR":
            paths.add(step.argument.strip().strip("\"'"))
        elif step.keyword in ("COPY", "ADD") and not step.exec_form():
            destination = step.argument.split()[-1] if step.argument.split() else ""
            if destination.startswith("/"):
                paths.add(destination)
    paths = {posixpath.normpath(path) for path in paths if path.startswith("/")} - {"/", INSIDE}
    texts = {**{f"tests/{path}": text for path, text in task.tests.items()}, "solution/solve.sh": task.solution}
    for path in sorted(paths):
        pattern = re.compile(rf"(?<![\w.-]){re.escape(path)}(?![\w.-])")
        for where, text in texts.items():
            if match := pattern.search(text):
                line = text.count("\n", 0, match.start()) + 1
                yield (f"{where} line {line} uses {path}, a folder of the task's image: in the sandbox the "
                       "environment's files are in the working folder (write paths relative to it)")
