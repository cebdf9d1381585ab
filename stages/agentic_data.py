"""Agent task rows from the published chat@1 suites: what the orchestrator poses to each task service."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stages.agentic_rl_config import TASK_OF_SUITE
from stages.evaluation.references import prompt_messages, reference_answer
from stages.evaluation.search_episodes import matches_graph, split_graph
from suites.prepare import split_seed


def agent_task_rows(rows: Sequence[Mapping], tasks: Sequence[str], data_seed: int) -> dict[str, list[dict]]:
    """{task: rows} for the configured tasks: prompt messages, reference answer and task metadata.

    Search rows carry the seed of the graph they were generated on; the first row of each split is
    replayed against that graph, so a wrong `data_seed` fails here instead of scoring every episode
    against the wrong graph.
    """
    by_task: dict[str, list[dict]] = {task: [] for task in tasks}
    checked: set[str] = set()
    for row in rows:
        task = TASK_OF_SUITE.get(row["suite"])
        if task not in by_task:
            continue
        metadata = {}
        if task == "search":
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
        raise ValueError(f"no rows for tasks {empty}: the datasets hold no {[s for s, t in TASK_OF_SUITE.items() if t in empty]} rows")
    return by_task
