"""The client of an engine fleet (rollout/engines.py) for trainers and evaluations that generate a whole
batch at a time (reasoning and general RL, distillation's student and teachers, the evaluations).

The one engine of a fleet of one gets the batch as one request, as SGLang's /generate takes it. Behind
SGLang's router a batch goes out group by group, all groups at once: the samples of one prompt are one
request, keyed by the prompt so that the router's consistent hashing puts them on one replica (whose
prefix cache then holds the prompt), each asked again on another replica if its own fails
(rollout/fleet.py). A seeded batch gives group i the seed + i, so that a group's samples differ from each other and a rerun draws the
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
    def __init__(self, url: str, *, routed: bool = True):
        """`url`: SGLang's router, or (`routed` False) the one engine of a fleet of one."""
        self.base_url, self.routed = url.rstrip("/"), routed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet-client", daemon=True)
        self._thread.start()
        self.fleet: Fleet = self._call(self._open())

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, return_logprob: bool = True,
                 routed_experts: bool = False) -> list[Sample]:
        if not self.routed:
            return self._call(self.fleet.generate_batch(self.base_url, prompts, sampling, return_logprob,
                                                        routed_experts))[0]
        groups = [list(run) for _, run in itertools.groupby(prompts)]
        batches = [self.fleet.generate_batch(_key(group[0]), group, _group_sampling(sampling, index), return_logprob,
                                             routed_experts)
                   for index, group in enumerate(groups)]
        answered = self._call(_all(batches))
        return [sample for samples, _ in answered for sample in samples]

    def prompt_logprobs(self, prompts: list[list[int]]) -> list[list[float | None]]:
        """log p(token | tokens before it) for every prompt token (None for the first): prefill only; behind
        the router each prompt on the replica it hashes to."""
        if not self.routed:
            return self._call(self.fleet.score_batch(self.base_url, prompts))
        return [scores[0] for scores in self._call(_all([self.fleet.score_batch(_key(p), [p]) for p in prompts]))]

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
        return Fleet(self.base_url, routed=self.routed)

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
