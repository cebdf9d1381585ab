"""Runs a small Python repository's tests and reports each one: the swe task's `run_tests` tool.

One implementation in two places, so that they agree to the byte: inside the code sandbox this very file runs as a
script (`python -I -S -B -c SOURCE`) over the workspace's Python files, and the suite's generator
(suites/swe.py) calls `report` in-process on a repository's files to record what the tool shows in its reference
trajectories. It needs only the standard library (the sandbox runs it without site-packages), and its report holds
no timings, host paths or ids: the same files give the same text.

Test files are plain pytest style (`def test_…(): assert …`), so pytest runs them too; this runner exists because
pytest's report is not stable (timings) and pytest takes half a second to start. For a failed `assert X == Y` the
report shows what X evaluated to, as pytest's assertion rewriting would. The repository's modules are imported from
the files given (top-level `NAME.py` files), not from the disk, and the interpreter's module table is restored
afterwards, so an in-process run leaves nothing behind.

What it cannot guard against: the code under test runs in the runner's own process and could forge a report (print a
summary line and exit). So its report is information for the model only: the swe task's success check runs the
hidden calls with rollout/agents/envs/case_runs.py instead and judges their returned values on the host.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import sys
import traceback
import types
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec

REPR_CHARACTERS = 200  # of a value shown in a failure: a model's runaway result must not flood the report
PRINTED_CHARACTERS = 500  # of what a failing test printed


def discover(paths: Sequence[str]) -> list[str]:
    """The test files among `paths`, as pytest would collect them: tests/test_*.py, in name order."""
    return sorted(p for p in paths if p.startswith("tests/") and os.path.basename(p).startswith("test_")
                  and p.endswith(".py"))


def report(files: Mapping[str, str], test_paths: Sequence[str]) -> tuple[str, bool]:
    """The report of running `test_paths` (keys of `files`) against the repository `files` (path -> text), and
    whether every test passed (and at least one ran)."""
    modules = _RepositoryModules(files)
    counts = {"failed": 0, "errors": 0, "passed": 0}
    lines: list[str] = []
    with modules.installed():
        for path in test_paths:
            lines += _run_file(path, files, modules, counts)
    lines.append(_summary(counts))
    return "\n".join(lines) + "\n", counts["passed"] > 0 and counts["failed"] == counts["errors"] == 0


def _summary(counts: Mapping[str, int]) -> str:
    """pytest's last line without its timing: "1 failed, 2 passed"."""
    parts = [f"{n} {'error' if kind == 'errors' and n == 1 else kind}" for kind, n in counts.items() if n]
    return ", ".join(parts) or "no tests ran"


class _RepositoryModules:
    """An import hook serving the repository's top-level modules from `files` while installed."""

    def __init__(self, files: Mapping[str, str]):
        self.sources = {path[:-3]: (path, text) for path, text in files.items()
                        if path.endswith(".py") and "/" not in path and path[:-3].isidentifier()}

    @contextlib.contextmanager
    def installed(self):
        saved = {name: sys.modules.pop(name) for name in self.sources if name in sys.modules}
        sys.meta_path.insert(0, self)
        try:
            yield
        finally:
            sys.meta_path.remove(self)
            for name in self.sources:
                sys.modules.pop(name, None)
            sys.modules.update(saved)

    def forget_imports(self) -> None:
        """Each test file imports the repository afresh, as a new pytest process would."""
        for name in self.sources:
            sys.modules.pop(name, None)

    # importlib's finder and loader protocol
    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None
        return ModuleSpec(name, self, origin=self.sources[name][0])

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        path, text = self.sources[module.__name__]
        module.__file__ = path
        exec(compile(text, path, "exec"), module.__dict__)


def _run_file(path: str, files: Mapping[str, str], modules: _RepositoryModules, counts: dict[str, int]) -> list[str]:
    modules.forget_imports()
    namespace = types.ModuleType(os.path.basename(path)[:-3])
    namespace.__file__ = path
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            exec(compile(files[path], path, "exec"), namespace.__dict__)
    except (Exception, SystemExit) as error:
        counts["errors"] += 1
        return [f"{path} ERROR", f"  {_describe(error, files, path)}", *_printed(printed)]
    lines = []
    tests = [(name, value) for name, value in vars(namespace).items()
             if name.startswith("test_") and isinstance(value, types.FunctionType)]
    for name, test in tests:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                test()
        except (Exception, SystemExit) as error:
            counts["failed"] += 1
            lines += [f"{path}::{name} FAILED", *_failure(error, files, path), *_printed(printed)]
        else:
            counts["passed"] += 1
            lines.append(f"{path}::{name} PASSED")
    return lines


def _failure(error: BaseException, files: Mapping[str, str], test_path: str) -> list[str]:
    """The failing line of the test, and what its comparison's left side evaluated to or what was raised."""
    frames = [(frame, line) for frame, line in traceback.walk_tb(error.__traceback__)
              if frame.f_code.co_filename == test_path]
    if not frames:
        return [f"  {_describe(error, files, test_path)}"]
    frame, number = frames[-1]
    source = _line(files, test_path, number)
    lines = [f"  line {number}: {source}"]
    if not isinstance(error, AssertionError):
        return [*lines, f"  {_describe(error, files, test_path)}"]
    if error.args:
        lines.append(f"  AssertionError: {error}")
    left = _compared(source)
    if left is not None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                value = eval(compile(ast.Expression(left), test_path, "eval"), frame.f_globals, frame.f_locals)
                lines.append(f"  {ast.unparse(left)} returned {_short(repr(value))}")
            except (Exception, SystemExit) as again:
                lines.append(f"  {ast.unparse(left)} raised {_describe(again, files, test_path)}")
    return lines


def _compared(source: str) -> ast.expr | None:
    """X of a line `assert X == Y`, else None."""
    try:
        statement = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    if (isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare)
            and len(statement.test.ops) == 1 and isinstance(statement.test.ops[0], ast.Eq)):
        return statement.test.left
    return None


def _describe(error: BaseException, files: Mapping[str, str], test_path: str) -> str:
    """`Type: message (file, line N)`, naming the repository line (not the test's) where it was raised."""
    if isinstance(error, SyntaxError):  # its message names the file and line already
        return f"{type(error).__name__}: {error}"
    where = [(frame.f_code.co_filename, line) for frame, line in traceback.walk_tb(error.__traceback__)
             if frame.f_code.co_filename in files and frame.f_code.co_filename != test_path]
    located = f" ({where[-1][0]}, line {where[-1][1]})" if where else ""
    message = _short(str(error))
    return f"{type(error).__name__}: {message}{located}" if message else f"{type(error).__name__}{located}"


def _line(files: Mapping[str, str], path: str, number: int) -> str:
    lines = files[path].splitlines()
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def _printed(buffer: io.StringIO) -> list[str]:
    text = buffer.getvalue().rstrip()
    return [f"  printed: {_short(text, PRINTED_CHARACTERS)}"] if text else []


def _short(text: str, limit: int = REPR_CHARACTERS) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def _python_files(root: str) -> dict[str, str]:
    """The workspace's Python files, relative path -> text (links not followed, unreadable files left out)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and not os.path.islink(path):
                with contextlib.suppress(OSError, UnicodeDecodeError), open(path, encoding="utf-8") as file:
                    files[os.path.relpath(path, root).replace(os.sep, "/")] = file.read()
    return files


def main() -> int:
    """Run the workspace's tests."""
    files = _python_files(".")
    text, passed = report(files, discover(files))
    sys.stdout.write(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
