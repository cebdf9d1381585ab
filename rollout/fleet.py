"""Engine replicas behind SGLang's router, as the rollouts of a stage use them.

Every turn of one rollout carries the rollout's id as SGLang's routing key, so the router's consistent
hashing keeps the rollout on one replica. A turn that fails (the replica died, the router answered 5xx
before its health check noticed) is asked again after a short backoff: the router's health check takes
the dead replica out and the key hashes onto a live one. A rollout is therefore never lost with its
replica, nor run twice: its earlier turns are kept, only the failed turn is asked again.

SGLang's router (sglang-router 0.3) drops `return_routed_experts` from the /generate body it forwards, so a
request that asks for each token's experts (routing replay) goes to a replica directly: the one its key hashes
to among the workers the router lists as healthy, asked again on the next listing if it fails there.

The router does not forward weight updates, so `update_weights` delivers them (from disk, or broadcast:
rollout/weight_push.py) to every worker the router lists (`GET /workers`) and checks the version each
one answers with. A worker that fails its update is taken out of the router; one the router already saw
unhealthy is taken out too and, once it answers again, given the weights of a later push before it is put
back: no replica serves stale weights after a push.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from dataclasses import dataclass

import httpx

from rollout.auth import bearer_headers
from rollout.client import (
    EngineRequestError,
    EngineUnavailableError,
    Sample,
    generate_payload,
    samples_from_answer,
    scoring_payload,
)
from rollout.protocol import ENGINE_HEADER, GenerateOutput, SamplingParams
from rollout.router import ROUTING_KEY_HEADER
from rollout.weight_push import WeightDelivery

log = logging.getLogger("rollout.fleet")

# Statuses that say the request is at fault, not the replica: asking again would get the same answer.
REQUEST_FAULTS = frozenset(range(400, 500)) - {408, 429}


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    healthy: bool


class Fleet:
    def __init__(self, url: str, *, routed: bool = True, max_attempts: int = 8, backoff_s: float = 0.5,
                 request_timeout_s: float = 600.0):
        """`url`: SGLang's router, or (`routed=False`) the one engine of a fleet of one, which needs no router."""
        self.router_url, self.routed = url.rstrip("/"), routed
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
        self.client = httpx.AsyncClient(timeout=request_timeout_s, headers=bearer_headers())
        self.weight_version: str | None = None  # what every listed worker serves since the last push
        self.parked: list[str] = []  # workers taken out of the router, put back once they serve the weights
        self.requests: Counter[str] = Counter()  # turns answered, by replica
        self.served_by: dict[str, list[str]] = {}  # in-flight rollout → the replica that answered each turn
        self._healthy: list[str] | None = None  # the router's healthy workers, for requests that bypass it
        self.retries = self.removals = self.readmissions = 0

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.aclose()

    async def generate(self, rollout_id: str, input_ids: list[int], sampling: SamplingParams,
                       routed_experts_from: int | None = None) -> Sample:
        """One turn of one rollout, on the rollout's replica; asked again if it fails there. With
        `routed_experts_from`, the experts of each position from there on come back with it."""
        sample, replica = await self.generate_batch(rollout_id, [input_ids], sampling,
                                                    routed_experts=routed_experts_from is not None,
                                                    routed_experts_from=routed_experts_from or 0)
        self.served_by.setdefault(rollout_id, []).append(replica)
        return sample[0]

    async def generate_batch(self, key: str, prompts: list[list[int]], sampling: SamplingParams,
                             return_logprob: bool = True, routed_experts: bool = False,
                             routed_experts_from: int = 0) -> tuple[list[Sample], str]:
        """A batch on the replica `key` hashes to (asked again if it fails there), and that replica."""
        payload = generate_payload(prompts, sampling, return_logprob, routed_experts, routed_experts_from)
        answer, replica = await self._answered(key, payload)
        return samples_from_answer(replica, prompts, answer), replica

    async def score_batch(self, key: str, prompts: list[list[int]]) -> list[list[float | None]]:
        """log p(token | tokens before it) of every prompt token (None for the first), prefill only, on the
        replica `key` hashes to."""
        answer, _ = await self._answered(key, scoring_payload(prompts))
        outputs = [GenerateOutput.model_validate(o) for o in answer]
        return [[lp for lp, _, _ in o.meta_info.input_token_logprobs or []] for o in outputs]

    async def _answered(self, key: str, payload: dict) -> tuple[list, str]:
        bypass = self.routed and payload.get("return_routed_experts", False)
        last_error = ""
        for attempt in range(self.max_attempts):
            if attempt:
                self.retries += 1
                log.warning("%s: asking again (attempt %d) after %s", key, attempt + 1, last_error)
                await asyncio.sleep(self.backoff_s * 2 ** min(attempt - 1, 4))
            try:
                url = await self._replica_for(key, fresh=attempt > 0) if bypass else self.router_url
                response = await self.client.post(f"{url}/generate", json=payload, headers={ROUTING_KEY_HEADER: key})
            except (httpx.TransportError, LookupError) as error:
                last_error = f"{'a replica' if bypass else 'the router'} is unreachable: {error!r}"
                continue
            if response.status_code == 200:
                replica = response.headers.get(ENGINE_HEADER, url if bypass else "unknown")
                self.requests[replica] += 1
                return response.json(), replica
            if response.status_code in REQUEST_FAULTS:
                raise EngineRequestError(f"{url}/generate answered {response.status_code}: {response.text}")
            last_error = f"answered {response.status_code}: {response.text[:200]}"
        raise EngineUnavailableError(f"{key}: no replica answered in {self.max_attempts} attempts: {last_error}")

    async def _replica_for(self, key: str, fresh: bool) -> str:
        """The healthy worker `key` hashes to, from the router's listing (listed again when `fresh`): a
        rollout's turns stay on one replica while the listing holds."""
        if fresh or self._healthy is None:
            self._healthy = sorted(worker.url for worker in await self.workers() if worker.healthy)
        if not self._healthy:
            raise LookupError(f"the router at {self.router_url} lists no healthy worker")
        return self._healthy[int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % len(self._healthy)]

    def finish(self, rollout_id: str) -> list[str]:
        """The rollout is over. Returns the replica of each of its turns."""
        return self.served_by.pop(rollout_id, [])

    def load(self) -> dict[str, int]:
        """In-flight rollouts by the replica of their latest turn."""
        return dict(Counter(replicas[-1] for replicas in self.served_by.values() if replicas))

    async def workers(self) -> list[Worker]:
        if not self.routed:
            return [Worker(self.router_url, self.router_url, healthy=True)]
        response = await self.client.get(f"{self.router_url}/workers")
        response.raise_for_status()
        return [Worker(w["id"], w["url"], w["is_healthy"]) for w in response.json()["workers"]]

    async def update_weights(self, weights: WeightDelivery) -> None:
        """Every worker the router lists serves `weights`, or is taken out of the router; parked workers
        that answer again get them too and are put back."""
        listed = await self.workers()
        self._healthy = None  # workers may leave or come back below
        for worker in listed:
            if not worker.healthy:
                await self._remove(worker, "unhealthy at a weight update", park=True)
        healthy = [worker for worker in listed if worker.healthy]
        returning = [url for url in self.parked if await self._answers(url)]
        problems = await weights.deliver(self.client, [worker.url for worker in healthy] + returning)
        self.weight_version = weights.version
        for worker in healthy:
            if problems[worker.url]:
                await self._remove(worker, f"weight update failed: {problems[worker.url]}", park=False)
        for url in returning:
            if not problems[url]:
                await self._readmit(url)

    async def _remove(self, worker: Worker, reason: str, park: bool) -> None:
        if not self.routed:
            raise EngineUnavailableError(f"the only engine, {worker.url}, is {reason}")
        response = await self.client.delete(f"{self.router_url}/workers/{worker.id}")
        if response.status_code >= 300:
            raise EngineUnavailableError(f"the router would not remove {worker.url}: {response.status_code} {response.text}")
        self.removals += 1
        if park:
            self.parked.append(worker.url)
        log.warning("took %s out of the router (%s)", worker.url, reason)

    async def _answers(self, url: str) -> bool:
        try:
            return (await self.client.get(f"{url}/health", timeout=5)).status_code == 200
        except httpx.TransportError:
            return False

    async def _readmit(self, url: str) -> None:
        response = await self.client.post(f"{self.router_url}/workers", json={"url": url})
        if response.status_code < 300:
            self.parked.remove(url)
            self.readmissions += 1
            log.warning("put %s back into the router with weights %s", url, self.weight_version)
