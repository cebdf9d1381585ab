"""Calling a module's function on test calls in a fresh code sandbox, and counting the calls that returned exactly
what they should: the code verifier's check of a completion (rewards.verifiers.CodeTests) and the swe task's of a
repository's module as the episode left it (rollout/agents/envs/swe_task.py).

The workspace holds the module, the calls' arguments and the runner (case_runner.py beside this file); the expected
values stay here, so nothing inside can read or forge them. Only the values written back count, compared here by
their canonical JSON (types count: True is not 1): what the code prints and how it exits do not matter. Whatever the
code does — loop, fork, allocate, write, exit, reach for the network or the host's files — is contained by the
sandbox's limits, and an unreadable or malformed result counts as no call passed.
"""

from __future__ import annotations

import json
from pathlib import Path

from rollout.agents.envs.code_sandbox import SandboxLimits, open_workspace
from suites.code_cases import FunctionCases, canonical

RUNNER_SOURCE = Path(__file__).with_name("case_runner.py").read_text()
RUNNER_FILES = ("case_runner.py", "calls.json", "results.json")


def passed_calls(source: str, cases: FunctionCases, limits: SandboxLimits, module: str = "solution") -> int:
    """How many of the cases' calls the function of `source` (the module `module`) answers with exactly the
    expected value."""
    path = f"{module}.py"
    if not module.isidentifier() or path in RUNNER_FILES:
        raise ValueError(f"{module!r} cannot be the tested module's name")
    calls = {"function": cases.function, "arguments": [list(case.arguments) for case in cases.cases]}
    files = {path: source, "calls.json": json.dumps(calls), "case_runner.py": RUNNER_SOURCE}
    # PYTHONHASHSEED: set and dict-of-str orders, hence what code returns from them, are the same on every run.
    # -P keeps the workspace off sys.path (the module's json.py cannot stand in for the runner's), -s the user site.
    with open_workspace(files, limits) as workspace:
        workspace.run(["env", "PYTHONHASHSEED=0", "python", "-P", "-s", "case_runner.py", path, "calls.json",
                       "results.json"])
        try:
            returned = json.loads(workspace.read("results.json"))
        except (OSError, ValueError, RecursionError):  # never written, not a regular file, not JSON
            return 0
    if not isinstance(returned, list) or len(returned) != len(cases.cases):
        return 0
    return sum(got == canonical(case.returns) for got, case in zip(returned, cases.cases, strict=True))
