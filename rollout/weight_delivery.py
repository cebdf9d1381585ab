"""How one push of the trainer's weights reaches a set of engines: a checkpoint each engine loads from
disk (`POST /update_weights_from_disk`), or a broadcast over SGLang's distributed weight update group
(rollout/weight_sync.py). The fleet (rollout/fleet.py) decides which engines; a delivery only says, per
engine, whether it now serves the weights."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import httpx
import torch

from rollout.weight_sync import FleetWeightGroup


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
    """The trainer's tensors as they are now (it waits for the push), sent to every engine at once."""

    group: FleetWeightGroup
    tensors: list[tuple[str, torch.Tensor]]
    version: str

    async def deliver(self, client: httpx.AsyncClient, urls: list[str]) -> dict[str, str | None]:
        return await asyncio.to_thread(self.group.push, urls, self.tensors, self.version)
