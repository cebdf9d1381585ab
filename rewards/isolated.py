"""`posttrain rewards check` runs the contract in a child process: a module that exits the interpreter,
crashes it, or holds the GIL past the timeout is reported as a failure with its cause, and nothing it
does reaches the checking process. `python -m rewards.isolated --path P --params JSON --timeout-s T
--out FILE` is that child."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from infra.lifetime import child_environment, exit_with_owner
from rewards.contract import ContractResult, check_contract

# Importing what a module needs (torch, a checkpoint) before its first call may take this long.
START_UP_S = 60.0
CALLS = 3  # the fixture batch twice and the empty batch


def check_contract_isolated(path: str, params: dict | None = None, timeout_s: float = 30.0,
                            start_up_s: float = START_UP_S) -> ContractResult:
    """`check_contract` in a child process, stopped after its calls' share of time plus start-up."""
    limit = start_up_s + CALLS * timeout_s
    with tempfile.TemporaryDirectory(prefix="posttrain-reward-check-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "rewards.isolated", "--path", path, "--params", json.dumps(params or {}),
                   "--timeout-s", str(timeout_s), "--out", str(out)]
        # The child sees the modules this process sees (a test's or a notebook's sys.path included).
        env = {**child_environment(), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 start_new_session=True)
        try:
            _, stderr = child.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return ContractResult(path, problems=[f"{path}: did not finish within {limit:g} s "
                                                  f"({CALLS} calls of at most {timeout_s:g} s and {start_up_s:g} s to start); "
                                                  "stopped (a module that holds the GIL cannot be interrupted in-process)"])
        if out.exists():
            return ContractResult(**json.loads(out.read_text()))
        last = (stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return ContractResult(path, problems=[f"{path}: the module's process ended before reporting ({_ending(child.returncode)}); "
                                              f"last line: {last[0]}"])


def _ending(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}" + (", as os._exit or sys.exit would" if returncode in (0, 1) else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--timeout-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    exit_with_owner()
    result = check_contract(args.path, json.loads(args.params), args.timeout_s)
    args.out.write_text(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
