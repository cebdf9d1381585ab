"""The DeepSpeed engine every trainer steps, built from a stage's OptimizerSettings and ComputeSettings:
precision, ZeRO (with optimizer offload), gradient accumulation, activation checkpointing and LoRA.

One code path for a laptop and a GPU cluster: DeepSpeed's accelerator picks the device (CUDA when
present, the CPU otherwise) and moves the model there; batches follow `engine.device`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.device import resolved_precision
from model.mtp import mtp_layer
from stages.common.config import ComputeSettings, OptimizerSettings, per_rank


@dataclass(frozen=True)
class StepShape:
    """How one rank computes its share of an optimizer step: `accumulation` passes of `micro` sequences."""

    micro: int
    accumulation: int


def step_shape(global_batch: int, world_size: int, micro_batch_size: int | None, field: str) -> StepShape:
    """`global_batch` (the config's `field`) as micro × accumulation × world size, or a ValueError naming
    the three numbers that do not multiply out."""
    micro = micro_batch_size or per_rank(global_batch, world_size, field)
    if global_batch % (micro * world_size):
        raise ValueError(f"{field} {global_batch} is not compute.micro_batch_size {micro} × {world_size} rank(s) × "
                         f"a whole number of accumulation steps")
    return StepShape(micro, global_batch // (micro * world_size))


def deepspeed_config(shape: StepShape, world_size: int, optimizer: OptimizerSettings, compute: ComputeSettings) -> dict:
    if compute.offload_optimizer and optimizer.zero_stage == 0:
        raise ValueError("compute.offload_optimizer needs optimizer.zero_stage 1, 2 or 3 (ZeRO holds the state it offloads)")
    zero: dict = {"stage": optimizer.zero_stage}
    if compute.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    return {
        "train_batch_size": shape.micro * shape.accumulation * world_size,
        "train_micro_batch_size_per_gpu": shape.micro,
        "gradient_accumulation_steps": shape.accumulation,
        # The trainer owns the boundary: one backward per micro-batch (each loss already its share of the
        # step's loss, so no 1/accumulation scaling), one step() per optimizer step. A step's micro-batches
        # may number other than `accumulation` (agentic RL trains whole rollouts' segments).
        "managed_gradient_accumulation": False,
        "gradient_clipping": optimizer.grad_clip,
        "zero_optimization": zero,
        # bf16: DeepSpeed keeps fp32 master weights and optimizer state; the module computes in bf16.
        "bf16": {"enabled": resolved_precision(compute.precision) == "bf16"},
        # Our torch AdamW also steps offloaded state (DeepSpeed's CPU Adam would compile an extension).
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def deepspeed_engine(module: torch.nn.Module, optimizer, scheduler, shape: StepShape, world_size: int,
                     settings: OptimizerSettings, compute: ComputeSettings):
    """A DeepSpeed engine training `module` with our optimizer and schedule (DeepSpeed's config holds the rest)."""
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=deepspeed_config(shape, world_size, settings, compute))
    return engine


# What `compute.experts_kernel: auto` runs, by device: the fastest forward + backward bench/moe_experts.py
# measured (3 rounds, median tokens/s). On 2 CPU cores, glm5-tiny: grouped_mm 14,363 (14,083-14,447), eager 14,176
# (10,573-14,294), batched_mm 841; glm5-small: eager 1,316 (1,278-1,329), grouped_mm 1,293 (1,290-1,332), batched_mm
# left out (18 GiB of copied expert weights). eager and grouped_mm tie on a CPU; grouped_mm, transformers' own
# default, stays. On a GPU, grouped_mm until bench/gpu_check.sh's figures say otherwise.
AUTO_EXPERTS_KERNEL = {"cpu": "grouped_mm", "cuda": "grouped_mm"}


def experts_kernel(compute: ComputeSettings) -> str:
    if compute.experts_kernel != "auto":
        return compute.experts_kernel
    return AUTO_EXPERTS_KERNEL["cuda" if torch.cuda.is_available() else "cpu"]


def adapt_model(model: torch.nn.Module, compute: ComputeSettings) -> None:
    """Before the engine is built: the MoE experts' kernel, LoRA adapters on the configured layers (every other
    weight frozen) and activation checkpointing, as `compute` asks. `model` is a Hugging Face model or holds one
    (the ORM)."""
    from transformers import PreTrainedModel

    causal_lm = next(module for module in model.modules() if isinstance(module, PreTrainedModel))
    if type(causal_lm)._can_set_experts_implementation():
        causal_lm.set_experts_implementation(experts_kernel(compute))
    if compute.lora.rank:
        from peft import LoraConfig, inject_adapter_in_model

        # The MTP layer (model/mtp.py) trains whole beside the engine, or stays frozen: no adapters in it.
        mtp = mtp_layer(causal_lm)
        config = LoraConfig(r=compute.lora.rank, lora_alpha=compute.lora.alpha, lora_dropout=0.0,
                            target_modules=list(compute.lora.targets),
                            exclude_modules=None if mtp is None else rf"model\.layers\.{mtp.layer_idx}\..*")
        try:
            inject_adapter_in_model(config, causal_lm)
        except ValueError as error:  # peft names the targets it could not find
            raise ValueError(f"compute.lora.targets: {error}") from None
    if compute.activation_checkpointing:
        from transformers.modeling_layers import GradientCheckpointingLayer

        causal_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # transformers recomputes a layer only while the layer is in training mode. RL trainers keep the
        # model in eval mode (no dropout: π_train must match the engine's π_infer); the layers alone are
        # switched, so their dropouts (in submodules) stay off.
        for module in causal_lm.modules():
            if isinstance(module, GradientCheckpointingLayer):
                module.training = True


def peak_memory_mb() -> float:
    """The step's peak memory: CUDA's max allocated since the last call on a GPU, the process's resident
    high-water mark on a CPU (the kernel keeps no per-step peak)."""
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return peak / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
