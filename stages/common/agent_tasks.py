"""Agent tasks as configs name them, and their rows: what the orchestrator poses to each task service (agentic RL,
distillation's agent episodes, the agentic evaluation). A row is a published chat@1 suite's conversation, or a
prompt@1 task row that carries the task's reference and metadata itself (an imported Harbor task is a `terminal`
row: data_prep/harbor_import.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from data_contracts import read_parquet
from infra.store import CommittedArtifact
from rollout.agents.envs.catalog import task_class
from stages.common.inputs import download_once
from stages.common.prompts import prompt_contract, prompt_messages, reference_answer
from suites.prepare import split_seed
from suites.search_tools import matches_graph, split_graph


def agent_task_rows(rows: Sequence[Mapping], tasks: Sequence[str], data_seed: int) -> dict[str, list[dict]]:
    """{task: rows} for the configured tasks: prompt messages, reference answer and task metadata. A task
    poses the rows of the suite (chat@1) or domain (prompt@1) it is named after (its class's `name`: `search`,
    `calc`, `terminal`, ...).

    Search rows carry the seed of the graph they were generated on; the first row of each split is
    replayed against that graph, so a wrong `data_seed` fails here instead of scoring every episode
    against the wrong graph.
    """
    task_of_suite = {task_class(task).name: task for task in tasks}
    by_task: dict[str, list[dict]] = {task: [] for task in tasks}
    checked: set[str] = set()
    for row in rows:
        task = task_of_suite.get(row["suite"] if "suite" in row else row["domain"])  # chat@1 or prompt@1
        if task is None:
            continue
        if "metadata_json" in row:  # prompt@1: the task's reference and metadata as published
            by_task[task].append({"id": row["id"], "messages": list(prompt_messages(row)),
                                  "reference_answer": row["reference_answer"] or "",
                                  "metadata": json.loads(row["metadata_json"] or "{}")})
            continue
        metadata = {}
        if row["suite"] == "search":
            metadata["graph_seed"] = split_seed(data_seed, row["split"])
            if row["split"] not in checked:
                if not matches_graph(row, split_graph(data_seed, row["split"])):
                    raise ValueError(f"row {row['id']}: its tool results do not match the search graph of "
                                     f"data_seed {data_seed}; set data_seed to the seed the suite was prepared with")
                checked.add(row["split"])
        by_task[task].append({"id": row["id"], "messages": list(prompt_messages(row)),
                              "reference_answer": reference_answer(row), "metadata": metadata})
    empty = [task for task, task_rows in by_task.items() if not task_rows]
    if empty:
        suites = [suite for suite, task in task_of_suite.items() if task in empty]
        raise ValueError(f"no rows for tasks {empty}: the datasets hold no rows of the suites {suites}")
    return by_task


def load_task_split(datasets: Sequence[CommittedArtifact], split: str, workdir: Path) -> list[dict]:
    """All rows of `split` across the datasets, in dataset order, each dataset read by the contract it was published
    under (chat@1, or prompt@1 task rows), into the folders stages.common.inputs.load_split uses."""
    rows: list[dict] = []
    for index, dataset in enumerate(datasets):
        local = download_once(dataset, workdir / f"dataset-{index}")
        rows += read_parquet(prompt_contract(dataset), local / f"{split}.parquet",
                             source=f"{dataset.uri}/{split}.parquet").to_pylist()
    return rows


def check_tasks(tasks: list[str]) -> list[str]:
    """Each task is offered (`posttrain.tasks` entry point) or importable by dotted path, or a ValueError names it."""
    for task in tasks:
        task_class(task)
    return tasks
