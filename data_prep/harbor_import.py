"""`posttrain data import DIR --as harbor`: a folder of Harbor tasks as a committed dataset of terminal task rows
(prompt@1, domain `terminal`: data_prep/harbor_rows.py), each task played in the sandbox before it is taken.

Each task is read (data_prep/harbor_tasks.py), checked for what the sandbox lacks (data_prep/harbor_needs.py), made a
row, and played as the terminal task plays it: its check must fail on the untouched workspace (tests that pass on
nothing check nothing) and pass after its reference solution. A task failing any of these is refused, naming the task
and the reason, as the other importers name a bad row: without `skip_bad_rows` the import stops listing every
refusal and commits nothing; with it the other tasks are committed and the refusals, with their reasons, written to
<folder>.rejected.jsonl beside the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from data_contracts import PROMPT_V1, ContractError, validate_table
from data_contracts.importers import RowProblem
from data_contracts.rows import table_from_rows
from data_prep.harbor_needs import sandbox_shortfall
from data_prep.harbor_rows import task_row
from data_prep.harbor_tasks import TaskRefused, read_task, task_folders
from data_prep.import_data import Imported, ImportFailed, dataset_label, publish_rows
from infra.store import ArtifactStore, sha256_file
from rollout.agents.envs.code_sandbox import CommandResult, open_workspace
from rollout.agents.envs.episode_workspaces import limits_note
from rollout.agents.envs.terminal_task import LIMITS, TerminalTask


def import_harbor(store: ArtifactStore, folder: Path, *, name: str | None = None, test_fraction: float = 0.1,
                  skip_bad_rows: bool = False, seed: int = 0, triggered_by: str = "posttrain data import") -> Imported:
    if not 0 <= test_fraction < 1:
        raise ImportFailed(f"--test-fraction {test_fraction}: between 0 and 1 (exclusive)")
    label = dataset_label(folder, name)
    rows, refused = read_tasks(folder, label)
    problems = [f"{task_folder}: {refusal}" for task_folder, refusal in refused]
    rejects = [{"where": str(task_folder), "problem": str(refusal), "record": None} for task_folder, refusal in refused]
    if problems and not skip_bad_rows:
        raise ImportFailed("\n".join([*problems, f"{len(problems)} of {len(rows) + len(problems)} tasks refused; "
                                                 "--skip-bad-rows imports the others"]))
    if not rows:
        raise ImportFailed(f"{folder}: no task to import")
    return publish_rows(store, folder, "harbor", label, PROMPT_V1, rows, test_fraction, seed, triggered_by, problems,
                        rejects, folder_digest(folder))


def folder_digest(folder: Path) -> str:
    """infra.publish.content_digest's digest (each regular file's relative path and sha256), without following links:
    a link in a task folder is refused, and must not make the digest read what it points to (the whole disk)."""
    files = []
    for here, _, names in os.walk(folder):  # os.walk follows no link to a folder
        files += [path for path in (Path(here) / name for name in names) if stat.S_ISREG(path.lstat().st_mode)]
    listing = "".join(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n" for path in sorted(files))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


def read_tasks(folder: Path, label: str, played: bool = True) -> tuple[list[dict], list[tuple[Path, TaskRefused]]]:
    """Every task folder under `folder` as a row (`imported_row`; not `played`: read and checked only, what
    `posttrain spec check` does), and the refused ones with why."""
    if not folder.is_dir():
        raise ImportFailed(f"{folder}: not a folder of Harbor tasks")
    folders = task_folders(folder)
    if not folders:
        raise ImportFailed(f"{folder}: no task folders in it (a task is a folder with task.toml, instruction.md, ...)")
    rows, refused = [], []
    for task_folder in folders:
        try:
            rows.append(imported_row(task_folder, label) if played else checked_row(task_folder, label))
        except TaskRefused as refusal:
            refused.append((task_folder, refusal))
    return rows, refused


def imported_row(folder: Path, label: str) -> dict:
    """The task in `folder` as a checked, played prompt@1 row, or TaskRefused saying why not."""
    row = checked_row(folder, label)
    play(row)
    return row


def checked_row(folder: Path, label: str) -> dict:
    """The task in `folder` as a prompt@1 row, read and checked for what the sandbox lacks but not played."""
    task = read_task(folder)
    if reason := sandbox_shortfall(task):
        raise TaskRefused(reason)
    try:
        row = task_row(task, label)
        validate_table(PROMPT_V1, table_from_rows(PROMPT_V1, [row], source=str(folder)), source=str(folder))
    except (RowProblem, ContractError) as problem:
        raise TaskRefused(str(problem)) from None
    return row


def play(row: Mapping) -> None:
    """The row played as the terminal task plays an episode (its files in a fresh workspace under the task's limits,
    the reference as one bash command, then the check); TaskRefused when the check passes untouched or fails after
    the reference. The sandbox's own results are read here, not the task's verdict, so a refusal can quote them."""
    metadata = json.loads(row["metadata_json"])
    try:
        TerminalTask().check_row(row["reference_answer"], metadata)
    except ValueError as error:
        raise TaskRefused(str(error)) from None
    with open_workspace(metadata["files"], LIMITS) as workspace:
        untouched = workspace.run(metadata["check"])
    if untouched.exit_code == 0:
        raise TaskRefused("its tests pass on the untouched environment: they check nothing the agent does")
    with open_workspace(metadata["files"], LIMITS) as workspace:
        solved = workspace.run(row["reference_answer"])
        checked = workspace.run(metadata["check"])
    if checked.exit_code != 0:
        raise TaskRefused(f"its reference solution (solution/solve.sh) does not pass its tests: solve.sh "
                          f"{_ending(solved)}; tests {_ending(checked)}")


def _ending(result: CommandResult, lines: int = 6) -> str:
    """A command's exit status and the end of its output, on one line (a refusal is one line of the rejects)."""
    note = limits_note(result.contained).strip()
    tail = " / ".join(result.output.strip().splitlines()[-lines:])
    return f"exited {result.exit_code}" + (f" {note}" if note else "") + (f" ({tail})" if tail else "")
