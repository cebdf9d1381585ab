"""Running a completion's code on a problem's test calls in a fresh code sandbox, and counting the calls it passes.

The workspace holds the code, the calls' arguments and the runner (rewards/case_runner.py); the expected values
stay here, so nothing inside can read or forge them. Whatever the code does — loop, fork, allocate, write, exit,
reach for the network or the host's files — is contained by the sandbox's limits, and an unreadable or
malformed result counts as no call passed.
"""

from __future__ import annotations

import json
from pathlib import Path

from rollout.agents.envs.code_sandbox import SandboxLimits, open_workspace
from suites.code_cases import FunctionCases, canonical

# Small: a test of a short function needs well under a second and a few MB; a hostile one is stopped soon.
CODE_TEST_LIMITS = SandboxLimits(cpu_s=5, wall_s=5.0, memory_mb=512, processes=16, file_mb=1, output_bytes=4096,
                                 tmp_mb=16)
RUNNER_SOURCE = Path(__file__).with_name("case_runner.py").read_text()
# PYTHONHASHSEED: set and dict-of-str orders, hence what code returns from them, are the same on every run.
# -P keeps the workspace off sys.path (a completion's json.py cannot stand in for the runner's), -s the user site.
RUN = ["env", "PYTHONHASHSEED=0", "python", "-P", "-s", "case_runner.py", "solution.py", "calls.json", "results.json"]


def passed_calls(code: str, cases: FunctionCases, limits: SandboxLimits = CODE_TEST_LIMITS) -> int:
    """How many of the cases' calls the code's function answers with exactly the expected value."""
    calls = {"function": cases.function, "arguments": [list(case.arguments) for case in cases.cases]}
    files = {"solution.py": code, "calls.json": json.dumps(calls), "case_runner.py": RUNNER_SOURCE}
    with open_workspace(files, limits) as workspace:
        workspace.run(RUN)
        try:
            returned = json.loads(workspace.read("results.json"))
        except (OSError, ValueError, RecursionError):  # never written, not a regular file, not JSON
            return 0
    if not isinstance(returned, list) or len(returned) != len(cases.cases):
        return 0
    return sum(got == canonical(case.returns) for got, case in zip(returned, cases.cases, strict=True))
