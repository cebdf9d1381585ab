"""What each evaluation is asked to do: the settings the pipeline spec, its UI form and the flows name,
apart from the evaluators themselves so that reading a config imports no model code."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout.agents.orchestrator import EpisodeSettings


@dataclass(frozen=True)
class EvalSettings:
    limit_per_suite: int = 200
    # Search episodes are several generations each: a smaller cap keeps evaluation short.
    search_episodes: int | None = None
    batch_size: int = 64
    max_new_tokens: int = 96
    # A search episode's turn budget: the reference trajectories take 4 or 5 turns.
    max_turns: int = 6
    seed: int = 0  # the seed the suites were prepared with


@dataclass(frozen=True)
class AgenticEvalSettings:
    episodes_per_task: int = 100
    temperature: float = 0.0
    max_new_tokens: int = 64
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    seed: int = 0  # the seed the suites were prepared with


@dataclass(frozen=True)
class GeneralEvalSettings:
    prompts_per_dataset: int = 200
    max_new_tokens: int = 64
    seed: int = 0


@dataclass(frozen=True)
class SampledEvalSettings:
    prompts: int = 1000
    samples_per_prompt: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
