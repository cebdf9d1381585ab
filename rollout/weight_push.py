"""The trainer's side of a weight push: how one push reaches a set of engines (`WeightDelivery`), as a
checkpoint each engine loads from disk (`POST /update_weights_from_disk`) or as a broadcast over SGLang's
distributed weight update group. The fleet (rollout/fleet.py) decides which engines; a delivery only says,
per engine, whether it now serves the weights.

The broadcast, without the disk:

The trainer asks every engine to join a torch.distributed group with it (`POST /init_weights_update_group`:
the trainer is rank 0, engine i is rank `rank_offset` = i + 1), then for each push tells them the names,
dtypes and shapes it is about to send (`POST /update_weights_from_distributed`) and broadcasts them: up to
BUCKET_BYTES as one buffer of their bytes back to back (SGLang's "flattened_bucket" load format), each engine
copying them into its parameters, else one tensor at a time in that order, each received straight into its
parameter. gloo on CPUs, NCCL on GPUs; the
request shapes are SGLang's (srt/managers/io_struct.py), so the same trainer code drives SGLang servers.

The group is its own process group over its own TCP store, apart from the trainer's DeepSpeed group: the
engines never join the trainer's collectives, and a trainer rank can hold one group per engine fleet.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httpx
import requests
import torch

from infra.ports import free_port
from rollout.auth import bearer_headers
from rollout.process_group import JOIN_TIMEOUT_S, dtype_name, join_group
from rollout.protocol import FLATTENED_BUCKET, GROUP_NAME, InitWeightsUpdateGroup, UpdateWeightsFromDistributed

log = logging.getLogger("rollout.weight_push")
# A push up to this size goes as one broadcast of the tensors' bytes back to back (SGLang's "flattened_bucket"),
# at the cost of one copy of them on each side: a broadcast per tensor paid a round trip each, 18 of the 20 ms
# a push of glm5-tiny's 82 tensors (5 MB) took over gloo on a 2-core CPU. Larger pushes go a tensor at a time, as
# one request still (split into buckets, an engine could decode between two of them on half-updated weights).
BUCKET_BYTES = 512 * 2**20


def address_reachable_from(engine_url: str) -> str:
    """The address an engine at `engine_url` reaches this machine at: loopback for an engine on it, else
    this host's name as the network resolves it."""
    host = urlsplit(engine_url).hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        return "127.0.0.1"
    return socket.gethostbyname(socket.getfqdn())


class WeightGroupError(RuntimeError):
    """A push (or the group it needs) failed; `problems` says which engine failed and how."""

    def __init__(self, problems: dict[str, str]):
        self.problems = problems
        url, problem = next(iter(problems.items()))
        super().__init__(f"{url}: {problem}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


@dataclass(frozen=True)
class WeightPayload:
    """One push's request to the engines and the buffers broadcast after it, in the request's order."""

    request: UpdateWeightsFromDistributed
    buffers: list[torch.Tensor]


def weight_payload(tensors: Iterable[tuple[str, torch.Tensor]], version: str,
                   bucket_bytes: int = BUCKET_BYTES) -> WeightPayload:
    """The named tensors as a push sends them: up to `bucket_bytes` as one flattened bucket, else one buffer each.

    Made on the thread that trains, before any other thread sends it: a torch operation run on a second thread
    gives the process a second OpenMP team, and with more OpenMP threads than cores libgomp stops its workers
    spinning between parallel regions, so every operation of the training step after it waited for its workers
    to wake (measured on 2 cores: a GRPO step's update 80 → 115 ms once a push had flattened its bucket on the
    fleet client's thread)."""
    # Widest dtypes first, so that in a bucket every tensor starts at a multiple of its element size.
    named = sorted(((name, tensor.detach().contiguous()) for name, tensor in tensors),
                   key=lambda pair: -pair[1].element_size())
    bucketed = sum(t.numel() * t.element_size() for _, t in named) <= bucket_bytes
    request = UpdateWeightsFromDistributed(names=[n for n, _ in named], dtypes=[dtype_name(t.dtype) for _, t in named],
                                           shapes=[list(t.shape) for _, t in named], weight_version=version,
                                           load_format=FLATTENED_BUCKET if bucketed else None)
    buffers = [torch.cat([t.reshape(-1).view(torch.uint8) for _, t in named])] if bucketed else [t for _, t in named]
    return WeightPayload(request, buffers)


class DistributedWeightPush:
    """The trainer's side: one group with `engine_urls`, and a push of named tensors to all of them at once."""

    def __init__(self, engine_urls: list[str], *, backend: str, master_address: str, master_port: int,
                 timeout_s: float = 300.0, join_timeout_s: float = JOIN_TIMEOUT_S):
        """`join_timeout_s`: how long this side waits for the engines to join (each engine bounds its own wait by
        its --weight-group-join-timeout-s); `timeout_s`: each request to an engine, and each broadcast."""
        self.engine_urls, self.timeout_s = list(engine_urls), timeout_s
        world_size = len(engine_urls) + 1
        # The engines' own check, made here first: a bad address or port is named before any engine waits on it.
        asked = [InitWeightsUpdateGroup(master_address=master_address, master_port=master_port, rank_offset=rank,
                                        world_size=world_size, backend=backend).model_dump()
                 for rank in range(1, world_size)]
        _named_if_silent(self.engine_urls)  # the group would wait for it until `join_timeout_s`
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(engine_urls)), thread_name_prefix="weight-push")
        joins = [self._pool.submit(self._post, url, "/init_weights_update_group", body)
                 for url, body in zip(self.engine_urls, asked, strict=True)]
        formed = None
        try:
            self.group = join_group(backend, master_address, master_port, 0, world_size, timeout_s, join_timeout_s)
        except Exception as error:  # a member never joined: its own answer says why
            formed = repr(error)
        finally:
            answers = [join.result() for join in joins]
        problems = {url: f"did not join the weight update group: {answer.get('message')}"
                    for url, answer in zip(self.engine_urls, answers, strict=True) if not answer.get("success")}
        if problems or formed:
            self.close()
            raise WeightGroupError(problems or dict.fromkeys(self.engine_urls, f"the group did not form: {formed}"))

    def push(self, payload: WeightPayload) -> None:
        """Every engine serves the payload's tensors (by the served model's parameter names) as its weight version,
        or WeightGroupError names those that do not."""
        _named_if_silent(self.engine_urls)  # a broadcast to it would wait, and the others' with it
        version = payload.request.weight_version
        answers = [self._pool.submit(self._post, url, "/update_weights_from_distributed", payload.request.model_dump())
                   for url in self.engine_urls]
        broken = None
        try:
            for buffer in payload.buffers:
                self.group.broadcast(buffer, 0).wait()
        except Exception as error:  # a member went away mid-push; the others time out of their receive
            broken = repr(error)
        problems = {}
        for url, answer in zip(self.engine_urls, (a.result() for a in answers), strict=True):
            if not answer.get("success") or answer.get("weight_version") != version:
                problems[url] = f"weight update to version {version} failed: {answer.get('message') or broken}"
        if problems or broken:
            raise WeightGroupError(problems or dict.fromkeys(self.engine_urls, f"the broadcast failed: {broken}"))

    def destroy(self) -> None:
        """The engines leave the group (those that still answer); this side lets it go."""
        for url in self.engine_urls:
            self._post(url, "/destroy_weights_update_group", {"group_name": GROUP_NAME})
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _post(self, url: str, path: str, body: dict) -> dict:
        try:
            response = requests.post(f"{url}{path}", json=body, timeout=self.timeout_s, headers=bearer_headers())
        except requests.RequestException as error:
            return {"success": False, "message": f"unreachable: {error!r}"}
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        if response.status_code != 200:  # FastAPI's errors say why in `detail`, SGLang's failed joins in `message`
            why = answer.get("detail") or answer.get("message") or response.text
            return {"success": False, "message": f"answered {response.status_code}: {why}"}
        return answer


def _named_if_silent(urls: list[str]) -> None:
    """WeightGroupError naming every engine that does not answer its health check."""
    silent = {url: problem for url in urls if (problem := _unanswered(url))}
    if silent:
        raise WeightGroupError(silent)


def _unanswered(url: str) -> str | None:
    try:
        status = requests.get(f"{url}/health", timeout=5, headers=bearer_headers()).status_code
    except requests.RequestException as error:
        return f"unreachable: {error!r}"
    return None if status == 200 else f"/health answered {status}"


class FleetWeightGroup:
    """The trainer's weights broadcast to whichever engines a fleet lists at each push. The group is formed
    with the engines of the first push and formed again (on a fresh port) when they change: a replica died,
    one was put back. A push that an engine fails is tried once more without it."""

    def __init__(self, backend: str, timeout_s: float = 120.0):
        self.backend, self.timeout_s = backend, timeout_s
        self.group: DistributedWeightPush | None = None

    def push(self, engine_urls: list[str], payload: WeightPayload) -> dict[str, str | None]:
        """Per engine URL: None once it serves the payload's weights, else why not."""
        problems: dict[str, str] = {}
        for _ in range(2):
            members = [url for url in engine_urls if url not in problems]
            if not members:
                break
            try:
                if self.group is None or self.group.engine_urls != members:
                    self._form(members)
                self.group.push(payload)
                break
            except WeightGroupError as error:
                problems |= error.problems
                self._let_go()
        return {url: problems.get(url) for url in engine_urls}

    def close(self) -> None:
        self._let_go()

    def _form(self, members: list[str]) -> None:
        self._let_go()
        self.group = DistributedWeightPush(members, backend=self.backend, master_address=address_reachable_from(members[0]),
                                           master_port=free_port(), timeout_s=self.timeout_s)
        log.info("weight update group formed with %d engines", len(members))

    def _let_go(self) -> None:
        if self.group is not None:
            group, self.group = self.group, None
            group.destroy()


class WeightDelivery(Protocol):
    version: str

    async def deliver(self, client: httpx.AsyncClient, urls: list[str]) -> dict[str, str | None]:
        """Per engine URL: None once it serves these weights as `version`, else why not."""
        ...


@dataclass(frozen=True)
class FromDisk:
    checkpoint: str
    version: str

    async def deliver(self, client: httpx.AsyncClient, urls: list[str]) -> dict[str, str | None]:
        problems = await asyncio.gather(*(self._load(client, url) for url in urls))
        return dict(zip(urls, problems, strict=True))

    async def _load(self, client: httpx.AsyncClient, url: str) -> str | None:
        try:
            response = await client.post(f"{url}/update_weights_from_disk",
                                         json={"model_path": self.checkpoint, "weight_version": self.version})
        except httpx.TransportError as error:
            return repr(error)
        if response.status_code != 200:
            return f"answered {response.status_code}: {response.text[:200]}"
        served = response.json().get("weight_version")
        return None if served == self.version else f"serves weight version {served!r}, not {self.version!r}"


@dataclass(frozen=True)
class Broadcast:
    """The trainer's tensors as they are now (it waits for the push), sent to every engine at once. Build it on
    the thread that trains (`weight_payload`); the delivery runs elsewhere and only sends."""

    group: FleetWeightGroup
    payload: WeightPayload

    @property
    def version(self) -> str:
        return self.payload.request.weight_version

    async def deliver(self, client: httpx.AsyncClient, urls: list[str]) -> dict[str, str | None]:
        return await asyncio.to_thread(self.group.push, urls, self.payload)
