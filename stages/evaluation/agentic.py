"""Held-out tool-task success of a committed checkpoint: agent episodes on the test splits, as eval@1.

The episodes run exactly as in agentic RL training (engine, task services, orchestrator), greedy by
default, on the first `episodes_per_task` held-out rows of each task. Success is the services' own
verdict; an episode whose environment failed is counted apart, never as a model failure.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from infra.store import ArtifactStore
from model.tokenizer import load_tokenizer
from rollout.agents.episodes import play_episodes
from rollout.agents.orchestrator import RolloutResult, RolloutSpec
from rollout.agents.task_services import TaskServices
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from rollout.protocol import SamplingParams
from stages.common.agent_tasks import agent_task_rows, load_task_split
from stages.evaluation.committed import committed_eval
from stages.evaluation.settings import AgenticEvalSettings

MODE = "engine"


def evaluate_agentic(store: ArtifactStore, checkpoint_uri: str, dataset_uris: list[str], tasks: list[str],
                     settings: AgenticEvalSettings, engines: EngineSettings = EngineSettings()) -> dict[str, float]:
    """{"<task>/tool_success", "tool_success", "env_failures"} for the checkpoint, committed once; on
    `engines` (default: one started here on the checkpoint; running ones are made to serve it)."""
    checkpoint = store.open(checkpoint_uri)
    datasets = [store.open(uri) for uri in dataset_uris]
    config = {"kind": "agentic", "settings": asdict(settings), "tasks": sorted(tasks), "checkpoint": checkpoint.digest,
              "datasets": sorted(d.digest for d in datasets)}

    def run(workdir: Path) -> tuple[dict[str, dict[str, float]], list[dict]]:
        tokenizer = load_tokenizer(checkpoint.download(workdir / "checkpoint"))
        rows = agent_task_rows(load_task_split(datasets, "test", workdir / "data"), tasks, settings.seed)
        specs = [RolloutSpec(f"eval-{task}-{i}", f"eval-{task}-{i}", task, row)
                 for task in sorted(tasks) for i, row in enumerate(rows[task][: settings.episodes_per_task])]
        with ExitStack() as stack:
            ready = launch_engines(stack, engines, checkpoint.uri, workdir, seed=settings.seed)
            services = stack.enter_context(TaskServices(dict.fromkeys(tasks, 1.0), workdir))  # while it loads
            fleet = ready()
            results = play_episodes(specs, fleet.url, services, tokenizer,
                                    SamplingParams(temperature=settings.temperature, max_new_tokens=settings.max_new_tokens),
                                    settings.episode, routed=fleet.routed)
        metrics = success_metrics(results, tasks)
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        eval_rows = [{"checkpoint_uri": checkpoint.uri, "suite": name.split("/")[0] if "/" in name else "all",
                      "metric": name.rsplit("/", 1)[-1], "split": "test", "value": value, "n": len(results),
                      "created_at": created_at} for name, value in metrics.items()]
        return {MODE: metrics}, eval_rows

    return committed_eval(store, checkpoint, datasets, config, settings.seed, run)[MODE]


def success_metrics(results: list[RolloutResult], tasks: list[str]) -> dict[str, float]:
    scored = [r for r in results if r.status != "env_error"]
    metrics = {}
    for task in sorted(tasks):
        mine = [r.reward for r in scored if r.spec.task == task]
        metrics[f"{task}/tool_success"] = sum(mine) / len(mine) if mine else 0.0
    metrics["tool_success"] = sum(r.reward for r in scored) / len(scored) if scored else 0.0
    metrics["env_failures"] = float(len(results) - len(scored))
    return metrics
