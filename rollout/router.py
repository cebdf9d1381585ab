"""Several rollout engine replicas behind one router: sticky routing, heartbeats and failover.

Every request of one rollout goes to the same replica (rollout/routing.py). Each replica's /health
is polled every `heartbeat_s`; a replica silent for longer than `deadline_s`, or one that refuses a
request, is removed from the ring, and the requests it had in flight are retried on the replicas
that remain: a rollout is never lost with its replica, nor run twice (its earlier turns are kept,
only the failed turn is asked again). A removed replica that answers again is given the current
weights and re-admitted. Every removal, retry and re-admission is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass

import httpx

from rollout.auth import bearer_headers
from rollout.client import EngineRequestError, EngineUnavailableError, Sample, generate_payload, samples_from_answer
from rollout.protocol import SamplingParams
from rollout.routing import ConsistentHashRouter

log = logging.getLogger("rollout.router")


@dataclass
class Replica:
    url: str
    last_seen: float
    down: asyncio.Event  # set while the replica is out of the ring
    admitted: bool = True


class EngineRouter:
    def __init__(self, urls: list[str], *, heartbeat_s: float = 0.5, deadline_s: float = 5.0,
                 load_factor: float = 1.25, max_attempts: int = 4, request_timeout_s: float = 600.0):
        if not urls:
            raise ValueError("the router needs at least one engine replica")
        now = time.monotonic()
        self.replicas = {url: Replica(url, now, asyncio.Event()) for url in urls}
        self.ring = ConsistentHashRouter(urls, load_factor=load_factor)
        self.heartbeat_s, self.deadline_s, self.max_attempts = heartbeat_s, deadline_s, max_attempts
        self.client = httpx.AsyncClient(timeout=request_timeout_s, headers=bearer_headers())
        self.weights: tuple[str, str] | None = None  # (checkpoint, version) every admitted replica serves
        self.requests: Counter[str] = Counter()  # generate requests answered, by replica
        self.in_flight: Counter[str] = Counter()  # generate requests sent and not yet answered, by replica
        self.served_by: dict[str, list[str]] = {}  # in-flight rollout → the replica that answered each turn
        self.retries = self.removals = self.readmissions = 0
        self._heartbeat: asyncio.Task | None = None

    async def __aenter__(self) -> EngineRouter:
        self._heartbeat = asyncio.create_task(self._beat())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        await self.client.aclose()

    async def generate(self, rollout_id: str, input_ids: list[int], sampling: SamplingParams) -> Sample:
        """One turn of one rollout, on the rollout's replica; retried elsewhere if that replica fails."""
        last_error: Exception | None = None
        for attempt in range(self.max_attempts):
            try:
                url = self.ring.route(rollout_id)
            except LookupError as error:  # every replica is down: wait for the heartbeat to re-admit one
                last_error = error
                await asyncio.sleep(self.deadline_s)
                continue
            replica = self.replicas[url]
            request = asyncio.ensure_future(self.client.post(
                f"{url}/generate", json=generate_payload([input_ids], sampling)))
            went_down = asyncio.ensure_future(replica.down.wait())
            self.in_flight[url] += 1
            try:
                await asyncio.wait({request, went_down}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.in_flight[url] -= 1
            went_down.cancel()
            try:
                if not request.done():  # the heartbeat gave up on the replica while it held this request
                    request.cancel()
                    raise EngineUnavailableError(f"{url} was removed while serving the request")
                response = request.result()
                if 400 <= response.status_code < 500:  # the request is at fault, not the replica
                    raise EngineRequestError(f"{url}/generate answered {response.status_code}: {response.text}")
                response.raise_for_status()
            except (httpx.TransportError, httpx.HTTPStatusError, EngineUnavailableError) as error:
                last_error = error
                self._remove(url, f"request of rollout {rollout_id} failed: {error!r}")
                self.retries += 1
                log.warning("retrying rollout %s (attempt %d) after %s failed", rollout_id, attempt + 2, url)
                continue
            self.requests[url] += 1
            self.served_by.setdefault(rollout_id, []).append(url)
            return samples_from_answer(url, [input_ids], response.json())[0]
        raise EngineUnavailableError(f"rollout {rollout_id}: no replica answered in {self.max_attempts} attempts: {last_error}")

    def finish(self, rollout_id: str) -> list[str]:
        """The rollout is over: its slot on its replica frees up. Returns the replica of each of its turns."""
        self.ring.release(rollout_id)
        return self.served_by.pop(rollout_id, [])

    async def update_weights(self, checkpoint: str, version: str) -> None:
        """Every admitted replica serves `checkpoint` as `version`; replicas re-admitted later get it too."""
        self.weights = (checkpoint, version)
        for url in list(self.ring.replicas):
            try:
                await self._load(url)
            except (httpx.TransportError, httpx.HTTPStatusError) as error:
                self._remove(url, f"weight update failed: {error!r}")

    def load(self) -> dict[str, int]:
        """In-flight rollouts by admitted replica."""
        return {url: self.ring.load.get(url, 0) for url in self.ring.replicas}

    async def _load(self, url: str) -> None:
        checkpoint, version = self.weights
        response = await self.client.post(f"{url}/update_weights",
                                          json={"model_path": checkpoint, "weight_version": version})
        response.raise_for_status()

    def _remove(self, url: str, reason: str) -> None:
        replica = self.replicas[url]
        if not replica.admitted:
            return
        replica.admitted = False
        replica.down.set()
        orphans = self.ring.remove(url)
        self.removals += 1
        log.warning("removed replica %s (%s); %d in-flight rollouts re-route", url, reason, len(orphans))

    async def _beat(self) -> None:
        while True:
            await asyncio.gather(*(self._check(replica) for replica in self.replicas.values()))
            await asyncio.sleep(self.heartbeat_s)

    async def _check(self, replica: Replica) -> None:
        try:
            response = await self.client.get(f"{replica.url}/health", timeout=self.deadline_s)
            response.raise_for_status()
        except (httpx.TransportError, httpx.HTTPStatusError):
            if replica.admitted and time.monotonic() - replica.last_seen > self.deadline_s:
                self._remove(replica.url, f"no heartbeat for {self.deadline_s:.1f} s")
            return
        replica.last_seen = time.monotonic()
        if not replica.admitted:
            try:
                if self.weights is not None:
                    await self._load(replica.url)
            except (httpx.TransportError, httpx.HTTPStatusError):
                return
            replica.admitted = True
            replica.down.clear()
            self.ring.add(replica.url)
            self.readmissions += 1
            log.warning("re-admitted replica %s with weights %s", replica.url, self.weights[1] if self.weights else "as started")
