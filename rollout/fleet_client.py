"""Replicas behind SGLang's router for trainers that generate a whole batch at a time (reasoning and
general RL, distillation's student), with the same calls as one engine's client (rollout/client.py).

A batch goes out group by group, all groups at once: the samples of one prompt are one request, keyed by
the prompt so that the router's consistent hashing puts them on one replica (whose prefix cache then
holds the prompt), each asked again on another replica if its own fails (rollout/fleet.py). A seeded
batch gives group i the seed + i, so that a group's samples differ from each other and a rerun draws the
same ones whichever replica serves them. Weight pushes reach every replica the router lists.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading

from rollout.client import Sample
from rollout.fleet import Fleet
from rollout.protocol import SamplingParams
from rollout.weight_push import WeightDelivery


class FleetClient:
    def __init__(self, router_url: str):
        self.base_url = router_url.rstrip("/")
        self.routed = True
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet-client", daemon=True)
        self._thread.start()
        self.fleet: Fleet = self._call(self._open())

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Sample]:
        groups = [list(run) for _, run in itertools.groupby(prompts)]
        batches = [self.fleet.generate_batch(_key(group[0]), group, _group_sampling(sampling, index))
                   for index, group in enumerate(groups)]
        answered = self._call(_all(batches))
        return [sample for samples, _ in answered for sample in samples]

    def replica_requests(self) -> dict[str, int]:
        """Requests answered so far, by replica."""
        return dict(self.fleet.requests)

    def update_weights(self, weights: WeightDelivery) -> None:
        """Every replica serves `weights`, or has left the router."""
        self._call(self.fleet.update_weights(weights))

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self.fleet.__aexit__(None, None, None))
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    async def _open(self) -> Fleet:
        return Fleet(self.base_url, routed=True)

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()


async def _all(coroutines: list) -> list:
    return list(await asyncio.gather(*coroutines))


def _key(prompt: list[int]) -> str:
    return hashlib.sha256(repr(prompt).encode()).hexdigest()[:16]


def _group_sampling(sampling: SamplingParams, index: int) -> SamplingParams:
    if sampling.sampling_seed is None:
        return sampling
    return sampling.model_copy(update={"sampling_seed": sampling.sampling_seed + index})
