"""The torch.distributed group both sides of SGLang's distributed weight update join: the trainer as rank 0
(rollout/weight_push.py), each engine as the rank it is told (rollout/engine/weight_updates.py)."""

from __future__ import annotations

import datetime
import socket
import time

import torch
import torch.distributed as dist

# The members join within seconds of each other (the trainer starts its store right after asking the engines
# to join): a minute is ample, and a master nobody listens on is named in a minute rather than in five.
JOIN_TIMEOUT_S = 60.0


class GroupJoinError(RuntimeError):
    """The group did not form within the join timeout; the message names its master and the timeout."""


def join_group(backend: str, master_address: str, master_port: int, rank: int, world_size: int,
               timeout_s: float = 300.0, join_timeout_s: float = JOIN_TIMEOUT_S) -> dist.ProcessGroup:
    """A process group of its own (not torch.distributed's default one); rank 0 hosts its TCP store.
    Forming it waits `join_timeout_s` at most (for the master, then for every member); each broadcast
    afterwards, `timeout_s` (an engine receives only once its current generation ends)."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: {backend!r}; give gloo or nccl")
    deadline = time.monotonic() + join_timeout_s
    if rank > 0:
        _wait_for_master(master_address, master_port, deadline, join_timeout_s)
    # What is left for every member to join; a second at least, to connect to a master found at the last moment.
    joining = datetime.timedelta(seconds=max(deadline - time.monotonic(), 1.0))
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        store = dist.TCPStore(master_address, master_port, world_size, is_master=rank == 0, timeout=joining)
        if backend == "gloo":
            group = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(store, rank, world_size, options)
    except dist.DistError as error:
        raise GroupJoinError(f"the weight update group of {world_size} at {master_address}:{master_port} did not "
                             f"form (join timeout {join_timeout_s:g} s): {str(error).splitlines()[0]}") from error
    store.set_timeout(timeout)  # NCCL exchanges its ids over the store at the first broadcast
    return group


def _wait_for_master(address: str, port: int, deadline: float, timeout_s: float) -> None:
    """Returns once `address:port` accepts connections. TCPStore's own wait overruns its timeout by a retry
    delay, and its error names neither the master's role nor the timeout."""
    while True:
        try:
            with socket.create_connection((address, port), timeout=max(deadline - time.monotonic(), 0.1)):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise GroupJoinError(f"no weight update group master listens at {address}:{port} (waited "
                                     f"{timeout_s:g} s): {error}") from error
            time.sleep(0.1)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
