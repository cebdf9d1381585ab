"""SFT's held-out success on the code tasks (swe, terminal): their test episodes played as agentic RL's evaluation
plays them (engine, task services, the sandbox; stages/evaluation/agentic.py), so SFT and agentic RL measure them
alike. Search is played in-process (search_episodes.py): its episodes need no sandbox, and it
keeps its sparse and dense figures."""

from __future__ import annotations

from collections.abc import Mapping

from data_contracts import PROMPT_V1
from infra.publish import published_contract
from infra.store import ArtifactStore
from rollout.agents.orchestrator import EpisodeSettings
from rollout.engine_settings import EngineSettings
from stages.evaluation.agentic import evaluate_agentic
from stages.evaluation.settings import AgenticEvalSettings, EvalSettings
from suites.prepare import TASK_ROW_SUITES


def task_datasets(store: ArtifactStore, datasets: Mapping[str, str]) -> dict[str, str]:
    """{task: uri}: the datasets named after a code task's suite that hold its task rows (prompt@1). Its
    conversations (chat@1) cannot pose an episode, so a dataset of those is left to the other evaluators."""
    return {name: uri for name, uri in datasets.items()
            if name in TASK_ROW_SUITES and published_contract(store.open(uri)) == PROMPT_V1.id}


def episode_settings(settings: EvalSettings) -> AgenticEvalSettings:
    """SFT's evaluation settings as episode settings: greedy, its turn budget and tokens per turn, and as many
    episodes per task as search plays."""
    return AgenticEvalSettings(episodes_per_task=settings.search_episodes or settings.limit_per_suite,
                               temperature=0.0, max_new_tokens=settings.max_new_tokens,
                               episode=EpisodeSettings(max_turns=settings.max_turns), seed=settings.seed)


def evaluate_task_episodes(store: ArtifactStore, checkpoint_uri: str, datasets: Mapping[str, str],
                           settings: EvalSettings, engines: EngineSettings) -> dict[str, float]:
    """{"<task>/tool_success", "tool_success", "env_failures"} on the code tasks' held-out rows (committed once);
    {} where `datasets` holds none."""
    tasks = task_datasets(store, datasets)
    if not tasks:
        return {}
    return evaluate_agentic(store, checkpoint_uri, [tasks[task] for task in sorted(tasks)], sorted(tasks),
                            episode_settings(settings), engines)
