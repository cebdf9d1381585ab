"""The MoE experts' kernels transformers offers, measured on a training step: forward + backward tokens/s of the
whole model with each `experts_implementation` (eager: a loop over the experts a batch hit; batched_mm: every
token's k experts as one batched matmul; grouped_mm: torch's grouped matmul over the experts' token groups), on
glm5-tiny and glm5-small, paired in one process.

Like for like: one model per preset with the same weights, switched between implementations in place
(`set_experts_implementation`), the same batch of random tokens, the same loss; each arm's loss and gradient norm
are printed and must match the eager loop's (the same computation), or the figures are refused. Arms alternate
for `--rounds` (bench/rounds.py), each timing `--steps` steps after one warm-up step; the figure is each arm's
median tokens/s over rounds with its range. `compute.experts_kernel: auto` picks what this found best on the
device (stages/common/training_engine.py names the figures it follows).

    .venv/bin/python bench/moe_experts.py [--presets glm5-tiny glm5-small --batch 8 --seq 256 --rounds 3 --out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, spread  # noqa: E402
from model.presets import PRESETS  # noqa: E402

KERNELS = ("eager", "batched_mm", "grouped_mm")


def model_of(preset: str, device: torch.device, dtype: torch.dtype):
    from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    config = GlmMoeDsaConfig(vocab_size=2048, max_position_embeddings=4096, routed_scaling_factor=1.0,
                             tie_word_embeddings=False, **PRESETS[preset])
    torch.manual_seed(0)
    return GlmMoeDsaForCausalLM(config).to(device, dtype).train()


def timed_steps(model, kernel: str, ids: torch.Tensor, steps: int) -> dict:
    """`steps` forward + backward passes after a warm-up one: tokens/s, and the first step's loss and grad norm."""
    model.set_experts_implementation(kernel)
    figures = {}
    for step in range(steps + 1):
        if step == 1:
            synchronize(ids.device)
            started = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if step == 0:
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
            figures = {"loss": loss.item(), "grad_norm": float(norm)}
    synchronize(ids.device)
    return figures | {"tokens_per_s": ids.numel() * steps / (time.perf_counter() - started)}


def batched_copies_gib(model, tokens: int) -> float:
    """What batched_mm holds per MoE layer: each token's k experts' weights copied (gate_up and down), and their
    gradients; past the memory a process can have, the arm is left out and the report says why."""
    config = model.config
    per_token = config.num_experts_per_tok * 3 * config.moe_intermediate_size * config.hidden_size
    bytes_per = next(model.parameters()).element_size()
    return 2 * tokens * per_token * bytes_per / 2**30


def memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 2**30
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["glm5-tiny", "glm5-small"], choices=sorted(PRESETS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3, so that the median and the range say something")
    cuda = torch.cuda.is_available()
    device, dtype = torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32
    report = {"machine": machine(), "device": torch.cuda.get_device_name() if cuda else "cpu", "dtype": str(dtype),
              "batch": args.batch, "seq": args.seq, "steps": args.steps, "presets": {}}
    for preset in args.presets:
        model = model_of(preset, device, dtype)
        ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
        ids = ids.to(device)
        copies, memory = batched_copies_gib(model, ids.numel()), memory_gib(device)
        kernels = [kernel for kernel in KERNELS if kernel != "batched_mm" or copies < memory / 4]
        if len(kernels) < len(KERNELS):
            report.setdefault("left_out", {})[preset] = (f"batched_mm: {copies:.1f} GiB of copied expert weights "
                                                         f"per MoE layer for {ids.numel()} tokens, of {memory:.0f} GiB")
        runs = alternate({kernel: lambda _, kernel=kernel, model=model, ids=ids: timed_steps(model, kernel, ids, args.steps)
                          for kernel in kernels}, args.rounds)
        for kernel, rounds in runs.items():
            for index, run in enumerate(rounds):
                print(json.dumps({"preset": preset, "kernel": kernel, "round": index, **run}), flush=True)
        reference = runs["eager"][0]
        tolerance = 1e-2 if cuda else 1e-4
        differing = [kernel for kernel, rounds in runs.items()
                     if abs(rounds[0]["loss"] - reference["loss"]) > tolerance * abs(reference["loss"])
                     or abs(rounds[0]["grad_norm"] - reference["grad_norm"]) > tolerance * 10 * reference["grad_norm"]]
        if differing:
            raise SystemExit(f"{preset}: {differing} computed another loss or gradient than the eager loop: no figures")
        report["presets"][preset] = {kernel: spread([run["tokens_per_s"] for run in rounds])
                                     for kernel, rounds in runs.items()}
        best = max(kernels, key=lambda kernel: report["presets"][preset][kernel]["median"])
        report["presets"][preset]["fastest"] = best
        print(json.dumps({"preset": preset, **report["presets"][preset]}), flush=True)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
