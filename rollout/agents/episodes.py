"""Play a list of agent episodes to the end on one engine, against running task services.

Agentic evaluation and the agentic teacher's share of distillation both need every episode of a known
list played once, all at once, and the results back in order; agentic RL's producer plays groups
without end instead (stages/agentic/rollouts.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rollout.agents.orchestrator import EpisodeSettings, Orchestrator, RolloutResult, RolloutSpec
from rollout.agents.task_services import TaskServices
from rollout.fleet import Fleet
from rollout.protocol import SamplingParams


def play_episodes(specs: Sequence[RolloutSpec], engine_url: str, services: TaskServices, tokenizer,
                  sampling: SamplingParams, episode: EpisodeSettings, *, routed: bool = False,
                  routed_experts: bool = False) -> list[RolloutResult]:
    """The result of every episode in `specs`, in order, played concurrently on the engine at `engine_url`
    (SGLang's router when `routed`), each turn with its positions' experts when `routed_experts`."""
    return asyncio.run(_play(specs, engine_url, services, tokenizer, sampling, episode, routed, routed_experts))


async def _play(specs, engine_url: str, services: TaskServices, tokenizer, sampling: SamplingParams,
                episode: EpisodeSettings, routed: bool, routed_experts: bool) -> list[RolloutResult]:
    services.registry.bind(asyncio.get_running_loop())
    async with Fleet(engine_url, routed=routed) as fleet:
        await services.registry.wait_registered(list(services.registry.entries), timeout_s=120)
        orchestrator = Orchestrator(services.registry, fleet, tokenizer, sampling, episode, routed_experts=routed_experts)
        try:
            return list(await asyncio.gather(*(orchestrator.play(spec) for spec in specs)))
        finally:
            await orchestrator.aclose()
