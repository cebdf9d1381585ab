"""Plays agent rollouts: many at once (asyncio), each against its task's service and the engine router.

A rollout resets its task's service with a prompt row, then alternates engine turns (routed by
rollout id, so all its turns share one replica) and environment steps until the episode ends or
runs out of turns, and asks the service for the reward. Its tokens are recorded as rollout@1 samples
(rollout/agents/trajectory.py). A failing environment marks the rollout `env_error` with the cause: such
samples are removed from training, never scored as the model's failure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from rollout.agents.context import OLD_RESULT_PLACEHOLDER, EpisodeContext
from rollout.agents.registry import TaskRegistry
from rollout.agents.trajectory import TrajectoryBuilder, observation_ids, prompt_ids
from rollout.auth import bearer_headers
from rollout.protocol import SamplingParams

if TYPE_CHECKING:  # the fleet's weight delivery imports torch, which a stage config (and the CLI) never needs
    from rollout.fleet import Fleet


@dataclass(frozen=True)
class RolloutSpec:
    rollout_id: str
    group_id: str
    task: str
    row: Mapping  # prompt@1-like: id, messages (the prompt), reference_answer, metadata


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class EpisodeSettings:
    """How long an agent episode may run, and how its context is managed as it grows (a validated
    dataclass: stage configs nest it, evaluations record it with `asdict`)."""

    max_turns: int = Field(6, ge=1, description="model turns per episode, at most")
    max_context: int = Field(1024, ge=64, description="tokens; an episode that outgrows it is truncated")
    keep_recent: int = Field(5, ge=0, description="keep-recent-k: tool results older than k rounds become a placeholder")
    discard_above: int = Field(900, ge=64, description="discard-all: past this many tokens the tool history is dropped")


@dataclass
class RolloutResult:
    spec: RolloutSpec
    rows: list[dict]  # rollout@1 rows
    reward: float | None
    status: str  # ok, truncated, env_error
    failure: str | None = None  # the environment's failure, when status is env_error
    weight_versions: list[int] = field(default_factory=list)
    turns: int = 0
    replicas: list[str] = field(default_factory=list)  # the engine replica of each turn
    credit: float | None = None  # the task's partial credit (tasks that grade progress), None without a verdict
    speculated_tokens: int = 0  # tokens decoded speculatively over its turns, and the verification steps they took
    verify_steps: int = 0


class EnvironmentFailure(RuntimeError):
    """The task service failed (unreachable, crashed, answered an error): not the model's failure."""


class Orchestrator:
    def __init__(self, registry: TaskRegistry, fleet: Fleet, tokenizer, sampling: SamplingParams,
                 settings: EpisodeSettings = EpisodeSettings(), env_timeout_s: float = 60.0,
                 routed_experts: bool = False):
        """`routed_experts`: every turn asks the engine for each position's experts (routing replay), which the
        rollout's samples then carry."""
        self.registry, self.fleet, self.tokenizer = registry, fleet, tokenizer
        self.sampling, self.settings, self.routed_experts = sampling, settings, routed_experts
        self.env = httpx.AsyncClient(timeout=env_timeout_s, headers=bearer_headers())
        self._placeholder_cache: dict[int, list[int]] = {}

    async def aclose(self) -> None:
        await self.env.aclose()

    async def play(self, spec: RolloutSpec) -> RolloutResult:
        await self.registry.acquire(spec.task)
        started = time.time()
        timing = {"gen": 0.0, "env": 0.0}
        builder = TrajectoryBuilder()
        credit = None
        try:
            status, reward, credit = await self._episode(spec, builder, timing)
            failure = None
        except EnvironmentFailure as error:
            status, reward, failure = "env_error", None, str(error)
        finally:
            replicas = self.fleet.finish(spec.rollout_id)
            await self.registry.release(spec.task)
        rows = [self._row(spec, index, segment, reward, status, started, timing)
                for index, segment in enumerate(builder.segments)]
        return RolloutResult(spec, rows, reward, status, failure, builder.weight_versions, builder.turns, replicas, credit,
                             builder.speculated_tokens, builder.verify_steps)

    async def _episode(self, spec: RolloutSpec, builder: TrajectoryBuilder, timing: dict
                       ) -> tuple[str, float, float | None]:
        """(status, reward, partial credit); an episode cut short (out of turns or context) has no verdict: 0, None."""
        url = self._env_url(spec.task)
        reset = await self._env(url, "/reset", {
            "episode_id": spec.rollout_id, "messages": list(spec.row["messages"]),
            "reference": spec.row["reference_answer"], "metadata": dict(spec.row.get("metadata") or {}),
        }, timing)
        first_prompt = prompt_ids(self.tokenizer, reset["messages"], reset["tools"])
        context = EpisodeContext(first_prompt, self.settings.keep_recent, self.settings.discard_above)
        for _ in range(self.settings.max_turns):
            ids = context.next_prompt()
            budget = self.settings.max_context - len(ids)
            if budget <= 0:
                await self._abandon(url, spec.rollout_id)
                return "truncated", 0.0, None
            started = time.monotonic()
            sampling = self.sampling.model_copy(update={"max_new_tokens": min(self.sampling.max_new_tokens, budget)})
            sample = await self.fleet.generate(spec.rollout_id, ids, sampling,
                                               builder.routed_from(ids) if self.routed_experts else None)
            timing["gen"] += time.monotonic() - started
            builder.add_turn(ids, sample)
            text = self.tokenizer.decode(sample.output_ids, skip_special_tokens=False)
            step = await self._env(url, "/step", {"episode_id": spec.rollout_id, "text": text}, timing)
            if step["done"]:
                verdict = await self._env(url, "/verify", {"episode_id": spec.rollout_id}, timing)
                return "ok", float(verdict["reward"]), verdict.get("credit")
            context.add_round(sample.output_ids, observation_ids(self.tokenizer, step["tool_results"]),
                              self._placeholder(len(step["tool_results"])))
        await self._abandon(url, spec.rollout_id)
        return "truncated", 0.0, None  # out of turns without an answer: the model's failure

    def _env_url(self, task: str) -> str:
        try:
            return self.registry.url(task)
        except LookupError as error:
            raise EnvironmentFailure(str(error)) from error

    async def _env(self, url: str, path: str, payload: dict, timing: dict) -> dict:
        started = time.monotonic()
        try:
            response = await self.env.post(f"{url}{path}", json=payload)
            response.raise_for_status()
            return response.json()
        except httpx.TransportError as error:
            raise EnvironmentFailure(f"{url}{path} unreachable: {type(error).__name__}") from error
        except httpx.HTTPStatusError as error:
            raise EnvironmentFailure(f"{url}{path} answered {error.response.status_code}") from error
        finally:
            timing["env"] += time.monotonic() - started

    async def _abandon(self, url: str, episode_id: str) -> None:
        try:
            await self.env.post(f"{url}/abandon", json={"episode_id": episode_id})
        except httpx.HTTPError:
            pass  # the service forgets it anyway when it restarts; nothing is trained from it

    def _placeholder(self, results: int) -> list[int]:
        if results not in self._placeholder_cache:
            self._placeholder_cache[results] = observation_ids(self.tokenizer, [OLD_RESULT_PLACEHOLDER] * results)
        return self._placeholder_cache[results]

    @staticmethod
    def _row(spec: RolloutSpec, index: int, segment, reward, status, started: float, timing: dict) -> dict:
        return {
            "sample_id": f"{spec.rollout_id}/{index}", "group_id": spec.group_id, "session_id": spec.rollout_id,
            "prompt_id": spec.row["id"], "task": spec.task, "prompt_ids": segment.prompt_ids,
            "response_ids": segment.response_ids, "loss_mask": segment.loss_mask,
            "rollout_logprobs": segment.logprobs, "weight_versions": sorted(segment.weight_versions),
            "turn_starts": segment.turn_starts, "routed_experts": segment.routed_experts, "reward": reward, "status": status,
            "t_start": started, "t_end": time.time(), "gen_seconds": timing["gen"], "env_seconds": timing["env"],
        }
