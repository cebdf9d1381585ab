"""What an engine agrees to load on `update_weights`, decided before a byte of weights is read.

A committed checkpoint from a store (its digests are checked on download) or a directory under one the
operator allowed (`--weights-dir`: where trainers push their weights), holding the architecture the
engine serves (an ORM checkpoint or a model with another vocabulary is not a policy update), and small
enough to fit in the memory left. Each refusal is an HTTP status naming what failed. And the engine's
side of a distributed push: the broadcast tensors received straight into the served parameters.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from infra.store import open_artifact
from rollout.protocol import FLATTENED_BUCKET, UpdateWeightsFromDistributed

# Keys of config.json that describe how a checkpoint was saved, not what the model is.
NOT_ARCHITECTURE = frozenset({"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache",
                              "_attn_implementation_autoset", "output_attentions", "output_hidden_states"})
# Keys every checkpoint of the served model must state, equal to the served ones.
REQUIRED = ("model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class UpdateRefused(Exception):
    def __init__(self, status_code: int, detail: str):
        super().__init__(detail)
        self.status_code, self.detail = status_code, detail


@dataclass(frozen=True)
class Incoming:
    config: dict
    weight_bytes: int


def inspect(model_path: str, allowed_dirs: list[Path], not_served: tuple[str, ...]) -> Incoming:
    """The checkpoint's config and the bytes of weights it would load, read without loading it."""
    if "://" in model_path:
        try:
            artifact = open_artifact(model_path)
            config = json.loads(artifact.read_bytes("config.json"))
        except Exception as error:  # not committed, no config.json, an unreachable store: one named 422
            raise UpdateRefused(422, f"{model_path}: not a committed checkpoint ({error})") from error
        weights = sum(entry.size for relpath, entry in artifact.manifest.files.items()
                      if relpath.endswith(WEIGHT_SUFFIXES) and not relpath.startswith(not_served))
        return Incoming(config, weights)
    path = Path(model_path).resolve()
    if not any(path.is_relative_to(allowed.resolve()) for allowed in allowed_dirs):
        raise UpdateRefused(403, f"{model_path}: local directories are loaded only from the engine's --weights-dir "
                                 f"({', '.join(map(str, allowed_dirs)) or 'none given'}); pass a store URI instead")
    if not (path / "config.json").is_file():
        raise UpdateRefused(422, f"{model_path}: not a checkpoint directory (no config.json)")
    weights = sum(p.stat().st_size for p in path.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    return Incoming(json.loads((path / "config.json").read_text()), weights)


def check_architecture(model_path: str, served: dict, incoming: dict) -> None:
    missing = [key for key in REQUIRED if key not in incoming]
    if missing:
        raise UpdateRefused(422, f"{model_path}: config.json lacks {', '.join(missing)}")
    differing = sorted(key for key in served.keys() & incoming.keys()
                       if key not in NOT_ARCHITECTURE and served[key] != incoming[key])
    if differing:
        shown = "; ".join(f"{key}: serving {served[key]!r}, got {incoming[key]!r}" for key in differing[:4])
        raise UpdateRefused(422, f"{model_path}: not the architecture this engine serves ({shown})")


def check_memory(model_path: str, weight_bytes: int, available_bytes: int) -> None:
    """The new weights load beside the served ones (those keep serving if loading fails)."""
    if weight_bytes > available_bytes:
        raise UpdateRefused(413, f"{model_path}: {weight_bytes / 2**30:.2f} GiB of weights, "
                                 f"{available_bytes / 2**30:.2f} GiB of memory available")


def available_memory(device) -> int:
    """Free memory where the model lives: the GPU's, or the machine's MemAvailable."""
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def receive_into(group: dist.ProcessGroup, request: UpdateWeightsFromDistributed, targets: dict[str, torch.Tensor]) -> None:
    """An engine's side of one push: every listed tensor received from rank 0 and copied into its target, one
    broadcast per tensor, or all of them in one (`load_format` "flattened_bucket": SGLang's, the tensors' bytes
    back to back in the listed order)."""
    unknown = [name for name in request.names if name not in targets]
    if unknown:
        raise KeyError(f"names: {', '.join(unknown[:3])} not in the served model")
    for name, shape in zip(request.names, request.shapes, strict=True):
        if list(targets[name].shape) != shape:
            raise ValueError(f"{name}: shape {shape}, the served model's is {list(targets[name].shape)}")
    dtypes = [getattr(torch, dtype) for dtype in request.dtypes]
    if request.load_format == FLATTENED_BUCKET:
        _receive_bucket(group, request, dtypes, targets)
        return
    if request.load_format is not None:
        raise ValueError(f"load_format: {request.load_format!r}; this engine receives a tensor per broadcast (none) "
                         f"or {FLATTENED_BUCKET!r}")
    for name, dtype, shape in zip(request.names, dtypes, request.shapes, strict=True):
        target = targets[name]
        if dtype == target.dtype and target.is_contiguous():
            group.broadcast(target, 0).wait()  # in place
        else:
            incoming = torch.empty(shape, dtype=dtype, device=target.device)
            group.broadcast(incoming, 0).wait()
            target.copy_(incoming)


def _receive_bucket(group, request: UpdateWeightsFromDistributed, dtypes: list[torch.dtype], targets) -> None:
    """One uint8 buffer holding every tensor, each starting where the one before ends, as SGLang's
    FlattenedTensorBucket lays it out (and refuses: a tensor whose offset its dtype cannot start at)."""
    spans, offset = [], 0
    for name, dtype, shape in zip(request.names, dtypes, request.shapes, strict=True):
        if offset % dtype.itemsize:
            raise ValueError(f"{name}: starts at byte {offset} of the bucket, not a multiple of {dtype}'s size")
        size = math.prod(shape) * dtype.itemsize
        spans.append((name, dtype, shape, offset, offset + size))
        offset += size
    device = next(iter(targets.values())).device
    bucket = torch.empty(offset, dtype=torch.uint8, device=device)
    group.broadcast(bucket, 0).wait()
    for name, dtype, shape, start, end in spans:
        targets[name].copy_(bucket[start:end].view(dtype).view(shape))
