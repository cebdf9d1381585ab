"""Batch concurrent /generate requests into one engine call, as SGLang's scheduler does.

Agent rollouts send one prompt per turn, hundreds at once; run one by one, each decode step would
carry a single row. Requests that arrive while the engine is busy wait in a queue; the next engine
call takes every waiting request with the same sampling settings and decodes their prompts as one
batch. A request with its own `sampling_seed` runs alone, so seeded sampling stays reproducible.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

from rollout.engine.generation import Completion, Engine
from rollout.protocol import UniformBatch


@dataclass
class _Pending:
    batch: UniformBatch
    done: asyncio.Future


class RequestBatcher:
    def __init__(self, engine: Engine, run: Callable[..., Future], max_prompts: int = 512):
        """`run(fn, *args)`: where the engine computes (rollout/main_thread.py), as a future."""
        self.engine, self.run, self.max_prompts = engine, run, max_prompts
        self._queue: asyncio.Queue[_Pending] | None = None
        self._worker: asyncio.Task | None = None

    async def generate(self, batch: UniformBatch) -> tuple[list[Completion], str]:
        if self._worker is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run())
        pending = _Pending(batch, asyncio.get_running_loop().create_future())
        await self._queue.put(pending)
        return await pending.done

    async def _run(self) -> None:
        while True:
            waiting = [await self._queue.get()]
            while not self._queue.empty():
                waiting.append(self._queue.get_nowait())
            for group in _mergeable_groups(waiting, self.max_prompts):
                await self._serve(group)

    async def _serve(self, group: list[_Pending]) -> None:
        if len(group) == 1:
            await self._serve_alone(group[0])
            return
        first = group[0].batch
        merged = replace(first, prompts=[p for g in group for p in g.batch.prompts],
                         routed_experts_start_len=[g.batch.routed_from(i) for g in group for i in range(len(g.batch.prompts))])
        try:
            completions, version = await asyncio.wrap_future(self.run(self.engine.generate, merged))
        except ValueError:  # one bad request must not fail the others: name it alone
            for pending in group:
                await self._serve_alone(pending)
            return
        start = 0
        for pending in group:
            count = len(pending.batch.prompts)
            pending.done.set_result((completions[start:start + count], version))
            start += count

    async def _serve_alone(self, pending: _Pending) -> None:
        try:
            pending.done.set_result(await asyncio.wrap_future(self.run(self.engine.generate, pending.batch)))
        except Exception as error:  # the endpoint turns it into the right HTTP status
            pending.done.set_exception(error)


def _mergeable_groups(waiting: list[_Pending], max_prompts: int) -> list[list[_Pending]]:
    """Requests with identical sampling and logprob settings and no seed of their own, in arrival order."""
    groups: dict[str, list[list[_Pending]]] = defaultdict(list)
    order: list[list[_Pending]] = []
    for pending in waiting:
        batch = pending.batch
        if batch.sampling.sampling_seed is not None or batch.wants_prompt_logprobs():
            order.append([pending])
            continue
        bucket = groups[batch.settings_key()]
        if not bucket or sum(len(p.batch.prompts) for p in bucket[-1]) + len(batch.prompts) > max_prompts:
            bucket.append([])
            order.append(bucket[-1])
        bucket[-1].append(pending)
    return order
