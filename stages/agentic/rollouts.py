"""Rollout groups for agentic RL, played on a background event loop while the trainer trains.

The producer owns the engine router, the orchestrator and the task registry's HTTP endpoint. It keeps
starting groups (G rollouts of one prompt, its task drawn by share, the prompt among the task's rows
uniformly or, with difficulty on, by the rows' running pass rates) as long as it holds permits, and
puts every finished group on a queue. The trainer returns permits: one per group it takes in async
mode, so generation stays `max_in_flight_groups` ahead of training; a whole batch after each step in
sync mode, so no rollout overlaps training. Weight pushes go to every replica SGLang's router lists.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter

from rollout.agents.orchestrator import Orchestrator, RolloutResult, RolloutSpec
from rollout.agents.registry import TaskRegistry
from rollout.fleet import Fleet
from rollout.weight_push import WeightDelivery
from stages.agentic.config import AgenticRlConfig
from stages.agentic.groups import is_stale, refill_group, rollout_passes, trained_reward
from stages.common.difficulty import Observation, PassRates


@dataclass
class Group:
    group_id: str
    task: str
    results: list[RolloutResult]
    prompt_id: str
    outside_band: bool  # its prompt's pass rate was outside the band when it was drawn (difficulty on)


class RolloutProducer:
    def __init__(self, config: AgenticRlConfig, tokenizer, task_rows: dict[str, list[dict]], fleet_url: str,
                 routed: bool, registry: TaskRegistry, rank: int, start_step: int = 0,
                 initial_weights: WeightDelivery | None = None, pass_rates: PassRates | None = None,
                 routed_experts: bool = False):
        """`fleet_url`: SGLang's router, or the only engine (`routed` False). `initial_weights`: what the
        replicas must serve before the first rollout, for a resumed run whose replicas started from the
        init checkpoint. `pass_rates`: the rows' running pass rates the prompts are drawn by (difficulty on),
        which the trainer updates as it takes groups. `routed_experts`: every turn asks for its positions'
        experts (a MoE policy: routing agreement, and replay)."""
        self.config, self.tokenizer, self.task_rows, self.pass_rates = config, tokenizer, task_rows, pass_rates
        self.routed_experts = routed_experts
        self.fleet_url, self.routed = fleet_url, routed
        self.registry, self.rank, self.initial_weights = registry, rank, initial_weights
        self.groups: queue.Queue[Group | None] = queue.Queue()  # None: generation failed
        self.loop = asyncio.new_event_loop()
        self.fleet: Fleet | None = None
        self._ready, self._failure = threading.Event(), None
        # Created here, used on the producer's loop (asyncio primitives bind to a loop on first use).
        self._stop_event = asyncio.Event()
        initial = config.max_in_flight_groups if config.mode == "async" else config.groups_per_step
        self._permits = asyncio.Semaphore(initial)
        self._thread = threading.Thread(target=self._run, name="rollout-producer", daemon=True)
        # Seeded by the step it starts at too: a resumed run does not replay the prompts it began with.
        self._rng = random.Random(f"agentic-rl:{config.seed}:{rank}:{start_step}")

    def start(self) -> None:
        """Start generating as soon as the engines answer and every task's service has registered."""
        self._thread.start()

    def wait_ready(self, timeout_s: float) -> None:
        if not self._ready.wait(timeout_s) or self._failure is not None:
            raise RuntimeError(f"the rollout producer did not start: {self._failure or 'timed out'}")

    def grant(self, groups: int) -> None:
        """Allow `groups` more groups to start."""
        for _ in range(groups):
            self.loop.call_soon_threadsafe(self._permits.release)

    def next_group(self, timeout_s: float = 600.0) -> Group:
        try:
            group = self.groups.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"no rollout group finished within {timeout_s:.0f} s") from None
        if group is None:
            raise RuntimeError(f"rollout generation failed: {self._failure}")
        return group

    def update_weights(self, weights: WeightDelivery) -> None:
        """Every replica serves `weights` (or has left the router) when this returns."""
        asyncio.run_coroutine_threadsafe(self.fleet.update_weights(weights), self.loop).result()

    def replica_stats(self) -> dict:
        return {"load": self.fleet.load(), "requests": dict(self.fleet.requests), "retries": self.fleet.retries,
                "removals": self.fleet.removals, "readmissions": self.fleet.readmissions}

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop_event.set)
            self._thread.join(timeout=30)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._produce())
        except Exception as error:  # surfaced to the trainer by next_group / wait_ready
            self._failure = repr(error)
            self._ready.set()
            self.groups.put(None)

    async def _produce(self) -> None:
        config = self.config
        self.registry.bind(self.loop)
        async with Fleet(self.fleet_url, routed=self.routed) as fleet:
            self.fleet = fleet
            if self.initial_weights is not None:
                await fleet.update_weights(self.initial_weights)
            await self.registry.wait_registered(list(config.tasks), timeout_s=120)
            orchestrator = Orchestrator(self.registry, fleet, self.tokenizer, config.sampling.params(), config.episode,
                                        routed_experts=self.routed_experts)
            self._ready.set()
            running: set[asyncio.Task] = set()
            index = 0
            while not self._stop_event.is_set():
                permit = asyncio.ensure_future(self._permits.acquire())
                stop = asyncio.ensure_future(self._stop_event.wait())
                await asyncio.wait({permit, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if self._stop_event.is_set():
                    permit.cancel()
                    break
                task = self.registry.next_task()
                row = self.next_row(task)
                group_id = f"r{self.rank}-g{index}"
                index += 1
                outside = self.pass_rates is not None and self.pass_rates.outside_band(row["id"])
                specs = [RolloutSpec(f"{group_id}-{i}", group_id, task, row) for i in range(config.group_size)]
                play = asyncio.create_task(self._play_group(orchestrator, group_id, task, specs, outside))
                running.add(play)
                play.add_done_callback(running.discard)
            for play in running:
                play.cancel()
            await orchestrator.aclose()

    def next_row(self, task: str) -> dict:
        """The prompt of the task's next group."""
        rows = self.task_rows[task]
        if self.pass_rates is None:  # the rng consumed as it always was: a run without difficulty draws alike
            return self._rng.choice(rows)
        return self.pass_rates.draw(self._rng, rows, 1, itemgetter("id"))[0]

    async def _play_group(self, orchestrator: Orchestrator, group_id: str, task: str, specs: list[RolloutSpec],
                          outside_band: bool) -> None:
        try:
            results = await asyncio.gather(*(orchestrator.play(spec) for spec in specs))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # no engine replica left, a bug: stop the trainer with the cause
            self._failure = f"group {group_id}: {error!r}"
            self.groups.put(None)
            return
        self.groups.put(Group(group_id, task, list(results), specs[0].row["id"], outside_band))


@dataclass
class GroupVerdict:
    results: list[RolloutResult] | None  # refilled to G, or None when the group is dropped
    env_failures: Counter  # by cause
    stale: int


def usable_group(group: Group, group_size: int, current_version: int, tau: int) -> GroupVerdict:
    """Environment failures and stale samples out; the rest refilled to G if more than G/2 remain."""
    failures = Counter(_cause(r.failure) for r in group.results if r.status == "env_error")
    valid = [r for r in group.results if r.status != "env_error" and r.rows]
    fresh = [r for r in valid if not is_stale(r.weight_versions, current_version, tau)]
    return GroupVerdict(refill_group(fresh, group_size), failures, len(valid) - len(fresh))


def _cause(failure: str | None) -> str:
    """The failure without the episode-specific detail, for counting by cause: "unreachable",
    "answered <status>", or the whole message."""
    text = failure or "unknown"
    if "unreachable" in text:
        return "unreachable"
    return "answered " + text.rsplit(" answered ", 1)[1] if " answered " in text else text


@dataclass
class StepBatch:
    groups: list  # the groups to train on, each G results
    rewards: list[list[float]]  # each trained result's reward (success plus weighted partial credit), as `groups`
    failures: Counter  # environment failures by cause
    stale: int  # samples dropped as too old
    dropped: int  # groups dropped: G/2 or fewer usable samples left
    no_signal: int  # usable groups whose rewards were all equal (dynamic sampling)
    taken: int  # groups taken from the producer for this step
    observed: list[Observation]  # every group taken, trained on or not: its prompt's passes (difficulty)
    drawn_outside_band: int  # groups taken whose prompt was drawn from outside the pass-rate band

    def counts(self) -> dict[str, int]:
        signal = sum(len(set(rewards)) > 1 for rewards in self.rewards)
        return {"groups_drawn": self.taken, "groups_with_signal": signal, "groups_trained": len(self.groups),
                "groups_no_signal": self.no_signal}


def next_batch(producer: RolloutProducer, config: AgenticRlConfig, version: int) -> StepBatch:
    """`groups_per_step` usable groups, taken as they finish. With dynamic sampling, a group whose rewards
    are all equal is not trained on and another is taken, up to `max_draws` times `groups_per_step` groups
    in all; then the step trains on what it has (none: no update). Generation never waits on it: in async
    mode every group taken is replaced at once, in sync mode every group not trained on."""
    sampling = config.dynamic_sampling
    cap = config.groups_per_step * sampling.max_draws if sampling.enabled else None
    batch = StepBatch([], [], Counter(), 0, 0, 0, 0, [], 0)
    while len(batch.groups) < config.groups_per_step and batch.taken != cap:
        group = producer.next_group()
        batch.taken += 1
        batch.observed.append(Observation(group.prompt_id, *rollout_passes(group.results, config.difficulty.solved_at)))
        batch.drawn_outside_band += group.outside_band
        verdict = usable_group(group, config.group_size, version, config.staleness_tau)
        batch.failures.update(verdict.env_failures)
        batch.stale += verdict.stale
        rewards = [trained_reward(r, config.partial_credit_weight) for r in verdict.results or []]
        trains = False
        if verdict.results is None:
            batch.dropped += 1
        elif sampling.enabled and len(set(rewards)) == 1:
            batch.no_signal += 1
        else:
            batch.groups.append(verdict.results)
            batch.rewards.append(rewards)
            trains = True
        still_short = len(batch.groups) < config.groups_per_step and batch.taken != cap
        if config.mode == "async" or (not trains and still_short):
            producer.grant(1)  # async: keep as many generating; sync: one more for one not trained on
    return batch
