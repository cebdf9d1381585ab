"""A Harbor task as a terminal task row: prompt@1, domain `terminal`, its tests run by the row's check.

    instruction.md                -> the prompt (one user message, as written)
    environment/ (but Dockerfile) -> metadata.files: the workspace the episode starts in
    environment/Dockerfile        -> metadata.harbor.dockerfile, recorded, not built
    tests/                        -> metadata.check: the bash command the terminal task runs after the episode
    solution/solve.sh             -> reference_answer: one bash command (a replay sends it through the bash tool)
    task.toml                     -> metadata.harbor.config; the folder's name -> the row's id

Harbor's verifier: "Harbor copies your task's tests/ directory into the container at /tests/ and runs test.sh"
(https://harborframework.com/docs/rewardkit), as `bash /tests/test.sh` from the task's working folder
(https://docs.nvidia.com/nemo/gym/data/task-folders/task-folder-verifiers), and the script "MUST write rewards to
either /logs/verifier/reward.txt (single numeric value) [or] /logs/verifier/reward.json (JSON object with multiple
metrics)" (https://mintlify.com/harbor-framework/harbor/concepts/verifiers); reward.json is read first
(harbor-framework/skills, harbor-adapter-creator).

The check does the same in the sandbox, after the episode. It writes the tests into its own /tmp: every sandbox
command gets a fresh private one, so no command of the episode ever saw the tests, nor could plant anything beside
them. Harbor's /tests and /logs are mapped onto that /tmp in the tests' text (the sandbox's root is read-only and
has neither). It runs `bash test.sh` in the workspace and exits 0 when the reward is full (reward.json's `reward`,
or all its values when it has no `reward`, or reward.txt's number, at least 1): the terminal task's success is yes or
no, and a partial reward is a no. A test.sh that writes no reward is judged by its exit status, as a plain check.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping

from data_contracts.importers import to_prompt
from data_prep.harbor_tasks import HarborTask, TaskRefused
from rollout.agents.envs.terminal_task import TerminalTask

PRIVATE = "/tmp/harbor"  # in the check's own /tmp
# Harbor's two verifier folders as paths in a test's text (`/tests/x.py`, `/logs/verifier/reward.txt`), not as parts
# of other names (`/app/tests/`, `./logs`).
VERIFIER_FOLDERS = re.compile(r"(?<![\w.-])/(tests|logs)(?![\w.-])")
# A command reaches bash as one argument of bwrap's, and Linux takes at most 128 KiB in one (MAX_ARG_STRLEN).
MAX_COMMAND_BYTES = 120_000
REWARD = """\
import json, pathlib, sys
logs, status = pathlib.Path(sys.argv[1]), int(sys.argv[2])
found = [path for path in (logs / "reward.json", logs / "reward.txt") if path.is_file()]
if not found:
    sys.exit(status)
text = found[0].read_text()
rewards = json.loads(text) if found[0].suffix == ".json" else {"reward": float(text)}
reward = float(rewards["reward"] if "reward" in rewards else min(map(float, rewards.values())))
print(f"harbor reward: {reward}")
sys.exit(0 if reward >= 1 else 1)
"""


def task_row(task: HarborTask, source: str) -> dict:
    """The task's prompt@1 row (importers.to_prompt's checks applied); TaskRefused when a command is too long."""
    check = check_command(task.tests)
    for what, command in (("tests/, carried by the check,", check), ("solution/solve.sh", task.solution)):
        if len(command.encode()) > MAX_COMMAND_BYTES:
            raise TaskRefused(f"{what} make a command of {len(command.encode()):,} bytes, more than the "
                              f"{MAX_COMMAND_BYTES:,} one sandbox command takes")
    harbor = {"task": task.name, "dockerfile": task.dockerfile,
              "config": json.loads(json.dumps(task.config, default=str))}  # TOML dates as text
    return to_prompt({"id": task.name, "domain": TerminalTask.name,
                      "messages": [{"role": "user", "content": task.instruction}],
                      "reference_answer": task.solution,
                      "metadata": {"family": "harbor", "files": task.files, "check": check, "harbor": harbor}}, source)


def check_command(tests: Mapping[str, str]) -> str:
    """The bash command that runs Harbor's verifier on the workspace as the episode left it."""
    lines = ["# The task's Harbor verifier (data_prep/harbor_rows.py): its tests/ written into this command's own",
             "# /tmp, test.sh run in the workspace, the reward it writes read.",
             f"mkdir -p {PRIVATE}/tests {PRIVATE}/logs/verifier {PRIVATE}/logs/agent"]
    for relative, text in sorted(tests.items()):
        target = shlex.quote(f"{PRIVATE}/tests/{relative}")
        if "/" in relative:
            lines.append(f"mkdir -p \"$(dirname {target})\"")
        lines.append(f"printf %s {shlex.quote(verifier_text(text))} > {target}")
    lines += [f"chmod -R u+x {PRIVATE}/tests",  # Harbor makes test.sh executable; a helper script may be run as ./x.sh
              f"bash {PRIVATE}/tests/test.sh",
              # -I: the workspace (the agent's files: a json.py of its own) is not on the reader's import path.
              f"python3 -I -c {shlex.quote(REWARD)} {PRIVATE}/logs/verifier \"$?\""]
    return "\n".join(lines)


def verifier_text(text: str) -> str:
    """A test file's text with Harbor's /tests and /logs moved into the check's private folder."""
    return VERIFIER_FOLDERS.sub(lambda match: f"{PRIVATE}/{match.group(1)}", text)
