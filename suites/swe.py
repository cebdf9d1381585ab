"""`swe`: fix the one bug of a small generated Python repository, with file and test tools.

Each repository is one module drawn from a template of suites/swe_templates.py (names and constants vary by seed)
with one bug of five families injected (off-by-one, wrong comparison, missed case, wrong default, swapped
arguments), its visible tests (tests/test_<module>.py: one fails, as the bug report says) and hidden tests: every
case of the template as a call and the value it must return (suites/code_cases.py's), which the swe task runs only
when the episode is verified and judges by the returned values alone. A bug is only kept where at least two cases
tell the buggy module from the fixed one, so the hidden tests cannot pass by special-casing the visible failure.

The reference trajectory lists the files, reads the module, runs the tests, fixes the bug with one exact-string
edit, runs the tests again and says what it fixed. Some trajectories hold an error segment first: an edit whose old
text is not in the file (indented wrongly), or a wrong edit that the tests show did not help and that is then
undone. The mistaken edit is flagged `error` (kept in context, not trained). Every tool result is what the swe task
answers for that call (both run suites/swe_tools.py's `execute`), so a replay through the task sees the same.

A row carries what the task needs to pose and verify it without this generator: the repository's files, the module's
path and the hidden tests (metadata), the fix as a unified diff (reference).
"""

from __future__ import annotations

import copy
import difflib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from model.tool_calls import ToolCall
from suites.code_cases import Case as Call
from suites.code_cases import FunctionCases
from suites.swe_runner import discover, report
from suites.swe_templates import FAMILIES, TEMPLATES, Bug, Case, FunctionModule
from suites.swe_tools import TOOLS as TOOLS  # the suite's tools, as search and calc name theirs
from suites.swe_tools import InMemoryRepository, execute
from suites.tool_use import call_turns, reply_turn

VISIBLE_PASSING = 2  # cases beside the failing one in the visible tests
ATTEMPTS = 50
# The templates offering each family (a template's bugs do not depend on its draw).
OFFERING = {family: sorted(name for name, make in TEMPLATES.items()
                           if family in {bug.family for bug in make(random.Random(0)).bugs}) for family in FAMILIES}


@dataclass(frozen=True)
class BuggyRepository:
    template: str
    bug: Bug
    module: FunctionModule
    files: dict[str, str]  # the repository as posed: the buggy module and its visible tests
    hidden_tests: FunctionCases  # every case of the template, with what the correct module returns
    fix: tuple[str, str]  # the reference edit: (old, new) whole lines of the buggy module
    failing: str  # the bug report's sentence: what the visible failing test calls, gets and expects

    @property
    def path(self) -> str:
        return f"{self.module.module}.py"

    @property
    def issue(self) -> str:
        return (f"Bug report: {self.failing} The code is in {self.path}. Fix the bug without changing the tests, "
                "and check that the tests pass.")

    @property
    def reference(self) -> str:
        """The fix as a unified diff of the module."""
        buggy = self.files[self.path]
        fixed = buggy.replace(*self.fix, 1)
        return "".join(difflib.unified_diff(buggy.splitlines(keepends=True), fixed.splitlines(keepends=True),
                                            f"a/{self.path}", f"b/{self.path}"))

    def metadata(self) -> dict:
        return {"template": self.template, "bug": self.bug.family, "module": self.path,
                "function": self.module.function, "files": dict(self.files), "hidden_tests": self.hidden_tests.data()}


@dataclass(frozen=True)
class SweEpisode:
    id: str
    repository: BuggyRepository
    messages: tuple[dict, ...]


def make_repository(rng: random.Random) -> BuggyRepository:
    """A repository with one bug: the family drawn first (each equally often), then a template offering it."""
    family = rng.choice(FAMILIES)
    for _ in range(ATTEMPTS):
        template = rng.choice(OFFERING[family])
        module = TEMPLATES[template](rng)
        bug = next(b for b in module.bugs if b.family == family)
        if (repository := _inject(template, module, bug)) is not None:
            return repository
    raise RuntimeError(f"no {family} bug that the tests expose in {ATTEMPTS} draws: the templates need more cases")


def _inject(template: str, module: FunctionModule, bug: Bug) -> BuggyRepository | None:
    """The repository with `bug` in `module`, or None where fewer than two cases expose it."""
    if module.source.count(bug.correct) != 1:
        raise ValueError(f"{template}: the {bug.family} bug's fragment must occur once in the source")
    buggy = module.source.replace(bug.correct, bug.buggy, 1)
    correct_function, buggy_function = _function(module.source, module.function), _function(buggy, module.function)
    outcomes = {case.label: (_outcome(correct_function, case), _outcome(buggy_function, case)) for case in module.cases}
    if any(good[0] != "returns" for good, _ in outcomes.values()):
        raise ValueError(f"{template}: a case the correct module raises on is no test")
    expected = {label: good[1] for label, (good, _) in outcomes.items()}
    hidden = FunctionCases(module.function, tuple(Call(case.args, expected[case.label]) for case in module.cases))
    if json.loads(json.dumps(hidden.data())) != hidden.data():
        raise ValueError(f"{template}: a case's arguments or value are no JSON values (the host compares JSON)")
    exposing = [case for case in module.cases if outcomes[case.label][0] != outcomes[case.label][1]]
    if len(exposing) < 2:
        return None
    failing = exposing[0]  # the bug report's, and the one failing visible test
    passing = [case for case in module.cases if case not in exposing][:VISIBLE_PASSING]
    visible = [case for case in module.cases if case is failing or case in passing]
    files = {f"{module.module}.py": buggy, f"tests/test_{module.module}.py": _test_file(module, visible, expected)}
    kind, value = outcomes[failing.label][1]
    got = f"returns {value!r}" if kind == "returns" else f"raises {value}"
    sentence = f"{failing.call(module.function)} {got} but should return {expected[failing.label]!r}."
    return BuggyRepository(template, bug, module, files, hidden, _line_edit(buggy, module.source), sentence)


def _function(source: str, name: str) -> Callable:
    """The generator's own template code, run here to learn what the tests should expect."""
    namespace: dict = {}
    exec(compile(source, "<template>", "exec"), namespace)
    return namespace[name]


def _outcome(function: Callable, case: Case) -> tuple[str, object]:
    try:
        return "returns", function(*copy.deepcopy(case.args))
    except Exception as error:  # a bug that raises is exposed as surely as one that returns wrong
        return "raises", type(error).__name__


def _test_file(module: FunctionModule, cases: list[Case] | tuple[Case, ...], expected: dict) -> str:
    tests = [f"def test_{case.label}():\n    assert {case.call(module.function)} == {expected[case.label]!r}\n"
             for case in cases]
    return f"from {module.module} import {module.function}\n\n\n" + "\n\n".join(tests)


def _line_edit(before: str, after: str) -> tuple[str, str]:
    """(old, new): the fewest whole lines of `before`, occurring once in it, whose replacement gives `after`."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    (_, i1, _, j1, _), (_, _, i2, _, j2) = changes[0], changes[-1]
    while not ("".join(a[i1:i2]) and before.count("".join(a[i1:i2])) == 1):
        if i2 < len(a):  # widen by the unchanged line after (or before) the change, the same in both
            i2, j2 = i2 + 1, j2 + 1
        else:
            i1, j1 = i1 - 1, j1 - 1
    return "".join(a[i1:i2]), "".join(b[j1:j2])


def _wrong_edits(repository: BuggyRepository) -> list[tuple[str, str]]:
    """Plausible wrong fixes: another bug of the template put into the buggy module, which leaves the visible tests
    failing and can be undone by one exact edit. A deleted guard is no attempt at a fix, so none of those."""
    buggy = repository.files[repository.path]
    edits = []
    for other in repository.module.bugs:
        if other is repository.bug or other.family == "missed_case" or buggy.count(other.correct) != 1:
            continue
        wrong = buggy.replace(other.correct, other.buggy, 1)
        old, new = _line_edit(buggy, wrong)
        still_failing = not report({**repository.files, repository.path: wrong}, discover(list(repository.files)))[1]
        if still_failing and wrong.count(new) == 1:
            edits.append((old, new))
    return edits


def _misquoted(old: str) -> str:
    """The fix's old text indented one level too deep: a copy that is not in the file."""
    return "".join(f"    {line}" for line in old.splitlines(keepends=True))


def _error_kinds(repository: BuggyRepository) -> list[str]:
    kinds = ["wrong_fix"] if _wrong_edits(repository) else []
    if _misquoted(repository.fix[0]) not in repository.files[repository.path]:
        kinds.append("misquoted_edit")
    return kinds


class _Trajectory:
    """The reference conversation, each tool result what `execute` answers on the repository as it is by then."""

    def __init__(self, repository: BuggyRepository):
        self.repository = InMemoryRepository(dict(repository.files))
        self.messages: list[dict] = [{"role": "user", "content": repository.issue}]

    def call(self, reasoning: str, name: str, error: bool = False, **arguments: str) -> str:
        call = ToolCall(name, arguments)
        result = execute(call, self.repository)
        self.messages += call_turns(reasoning, call, result, error)
        return result


def _messages(repository: BuggyRepository, error_kind: str | None, rng: random.Random) -> tuple[dict, ...]:
    path, (old, new) = repository.path, repository.fix
    explanation = repository.bug.explanation
    played = _Trajectory(repository)
    played.call("List the repository's files.", "list_files")
    played.call(f"Read {path}, where the report says the bug is.", "read_file", path=path)
    played.call("Run the tests to see which fail and how.", "run_tests")
    fix_reasoning = f"The bug: {explanation}. Fix that line in {path}."
    if error_kind == "misquoted_edit":
        played.call(fix_reasoning, "edit_file", error=True, path=path, old=_misquoted(old), new=new)
        fix_reasoning = f"The old text must be copied from {path} exactly, indentation included. {fix_reasoning}"
    elif error_kind == "wrong_fix":
        wrong_old, wrong_new = rng.choice(_wrong_edits(repository))
        played.call(f"Maybe this line is the bug: change `{wrong_old.strip()}` to `{wrong_new.strip()}`.",
                    "edit_file", error=True, path=path, old=wrong_old, new=wrong_new)
        played.call("Run the tests to check the change.", "run_tests")
        played.call("The change did not fix the failing test: undo it.", "edit_file", path=path, old=wrong_new,
                    new=wrong_old)
    played.call(fix_reasoning, "edit_file", path=path, old=old, new=new)
    played.call("Run the tests again to check the fix.", "run_tests")
    played.messages.append(reply_turn("All the tests pass.", f"Fixed the bug in {path}: {explanation}."))
    return tuple(played.messages)


def generate(count: int, seed: int, error_rate: float = 0.3) -> list[SweEpisode]:
    """`count` episodes; `error_rate` of them hold an error segment (a misquoted edit, or a wrong fix undone)."""
    rng = random.Random(f"swe:{seed}")
    episodes = []
    for index in range(count):
        repository = make_repository(rng)
        error_kind = rng.choice(_error_kinds(repository)) if rng.random() < error_rate else None
        episodes.append(SweEpisode(f"swe-{seed}-{index}", repository, _messages(repository, error_kind, rng)))
    return episodes
