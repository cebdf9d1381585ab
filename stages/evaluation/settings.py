"""What each evaluation is asked to do: the settings the pipeline spec, its UI form and the flows name,
apart from the evaluators themselves so that reading a config imports no model code."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated

from pydantic import Field

from rollout.agents.orchestrator import EpisodeSettings


# Each field's description is what the UI's form shows under it (Annotated keeps these plain dataclasses).
@dataclass(frozen=True)
class EvalSettings:
    limit_per_suite: Annotated[int, Field(description="held-out samples per suite, at most")] = 200
    # Search episodes are several generations each: a smaller cap keeps evaluation short.
    search_episodes: Annotated[int | None, Field(description="search episodes, at most (default: limit_per_suite)")] = None
    batch_size: Annotated[int, Field(description="prompts per generate call")] = 64
    max_new_tokens: Annotated[int, Field(description="tokens per answer (per turn in search episodes)")] = 96
    # A search episode's turn budget: the reference trajectories take 4 or 5 turns.
    max_turns: Annotated[int, Field(description="turns per search episode")] = 6
    seed: Annotated[int, Field(description="the seed the suites were prepared with")] = 0


@dataclass(frozen=True)
class AgenticEvalSettings:
    episodes_per_task: Annotated[int, Field(description="held-out episodes per task")] = 100
    temperature: Annotated[float, Field(description="0: greedy")] = 0.0
    max_new_tokens: Annotated[int, Field(description="tokens per turn")] = 64
    episode: Annotated[EpisodeSettings, Field(description="turns and context management of an episode")] = field(
        default_factory=EpisodeSettings)
    seed: Annotated[int | None, Field(description="the seed the suites were prepared with; default: the run's data_seed")] = None


@dataclass(frozen=True)
class GeneralEvalSettings:
    prompts_per_dataset: Annotated[int, Field(description="held-out prompts per dataset, at most")] = 200
    max_new_tokens: Annotated[int, Field(description="tokens per reply")] = 64
    seed: Annotated[int | None, Field(description="seed of the sampled replies; default: the run's")] = None


@dataclass(frozen=True)
class SampledEvalSettings:
    prompts: Annotated[int, Field(description="held-out prompts, at most")] = 1000
    samples_per_prompt: Annotated[int, Field(description="sampled answers per prompt (accuracy_sampled)")] = 4
    temperature: Annotated[float, Field(description="of the sampled answers (greedy is measured too)")] = 1.0
    max_new_tokens: Annotated[int, Field(description="tokens per answer")] = 64
    seed: Annotated[int | None, Field(description="seed of the sampled answers; default: the run's")] = None


def with_run_seed(settings, seed: int):
    """`settings` seeded with the run's seed where they name none: a form left empty, or a stage run alone, evaluates
    with the seed it trained with."""
    return settings if settings.seed is not None else replace(settings, seed=seed)
