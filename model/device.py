"""Where a model runs and in what precision, for the code that serves or scores with one (rollout engines,
evaluators, reward models); trainers get the same device from DeepSpeed's accelerator."""

from __future__ import annotations

import os
from typing import Literal

import torch

from model.precision import Precision


def inference_device() -> torch.device:
    """This process's GPU (LOCAL_RANK's, under a launcher) when CUDA is present, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return torch.device("cpu")


def resolved_precision(precision: Precision) -> Literal["fp32", "bf16"]:
    """`auto` is bf16 where CUDA is, fp32 on a CPU."""
    if precision == "auto":
        return "bf16" if torch.cuda.is_available() else "fp32"
    return precision


def torch_dtype(precision: Precision) -> torch.dtype:
    return torch.bfloat16 if resolved_precision(precision) == "bf16" else torch.float32
