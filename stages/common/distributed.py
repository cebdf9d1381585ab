"""Process-group set-up shared by every trainer: one code path for a laptop, torchrun and a cluster.

On a machine without CUDA DeepSpeed runs on its CPU accelerator with the gloo backend; a lone
process (no launcher) still gets the rendezvous variables DeepSpeed insists on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed

from infra.ports import free_port


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    import deepspeed
    import deepspeed.ops

    # DeepSpeed's CPU accelerator JIT-compiles a shared-memory all-reduce op on first use (minutes on
    # a fresh machine); gloo's all-reduce is plenty for what CPU runs exchange.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    return Dist(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


def rank_share(items: list, rank: int, per_rank: int) -> list:
    """This rank's consecutive `per_rank` items of a list drawn the same on every rank."""
    return items[rank * per_rank:(rank + 1) * per_rank]


def all_mean(value: float) -> float:
    """The mean of a scalar over ranks (for logging the same curve whatever the world size)."""
    return all_sum(torch.tensor([value], dtype=torch.float64)).item() / world_size()


def all_max(value: float) -> float:
    """The largest value of a scalar over ranks (what every rank must wait for, or make room for)."""
    import torch.distributed as dist

    return _reduced(torch.tensor([value], dtype=torch.float64), dist.ReduceOp.MAX).item()


def all_sum(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (on the CPU) summed over ranks, on the CPU."""
    import torch.distributed as dist

    return _reduced(tensor, dist.ReduceOp.SUM)


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def _reduced(tensor: torch.Tensor, op) -> torch.Tensor:
    """All-reduced over ranks. NCCL reduces only tensors on a GPU: the value goes there and back."""
    import torch.distributed as dist

    if world_size() == 1:
        return tensor
    reduced = tensor.to("cuda" if torch.cuda.is_available() else "cpu", copy=True)
    dist.all_reduce(reduced, op=op)
    return reduced.cpu()


def all_gather_objects(value) -> list:
    """`value` (anything picklable) of every rank, in rank order."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    return everyone


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
