"""The torch.distributed group both sides of SGLang's distributed weight update join: the trainer as rank 0
(rollout/weight_push.py), each engine as the rank it is told (rollout/engine/weight_updates.py)."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def join_group(backend: str, master_address: str, master_port: int, rank: int, world_size: int,
               timeout_s: float = 300.0) -> dist.ProcessGroup:
    """A process group of its own (not torch.distributed's default one); rank 0 hosts its TCP store."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(master_address, master_port, world_size, is_master=rank == 0, timeout=timeout)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world_size, options)
    raise ValueError(f"backend: {backend!r}; give gloo or nccl")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
