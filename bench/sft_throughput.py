"""Training tokens/s of our SFT step against a plain PyTorch loop on the same model and batches.

Same process, same model weights, same batches, alternating rounds so that machine noise hits both
sides alike. Our step is what stages/sft/train.py runs in `--phase` (DeepSpeed engine, masked SFT loss with
the LM head on trained positions only; in the sparse phase also top-k attention and the DSA indexer
loss, with eager attention); the plain loop is the textbook one (AdamW, cross-entropy over every
position, default attention, dense), under autocast in bf16. Both run on the device DeepSpeed's
accelerator picks (CUDA when present). On a GPU it also reports model FLOPs utilisation: 6 × the
parameters a token passes through (routed experts counted at top-k of n) × tokens/s over the GPU's
peak (`--peak-tflops`; H100 and H200 bf16 dense by default). `--losses` prints every step's loss
and the process's peak memory instead (bench/gpu_check.sh compares fp32 on the GPU with the CPU; with
and without `--activation-checkpointing` it gives what checkpointing saves).

    .venv/bin/python bench/sft_throughput.py --rounds 5 --steps 10
    .venv/bin/python bench/sft_throughput.py --model glm5-small --precision bf16 --batch 64
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.device import resolved_precision  # noqa: E402
from model.presets import PRESETS, build_model, parameter_count  # noqa: E402
from model.renderer import render  # noqa: E402
from model.tokenizer import train_tokenizer  # noqa: E402
from stages.common.batches import GlobalBatches, TokenizedSample, collate  # noqa: E402
from stages.common.distributed import init_distributed  # noqa: E402
from stages.common.finite import FiniteSteps  # noqa: E402
from stages.common.training_engine import adapt_model, peak_memory_mb, step_shape  # noqa: E402
from stages.sft.config import SftConfig  # noqa: E402
from stages.sft.step import enter_phase, train_step  # noqa: E402
from stages.sft.train import build_engine  # noqa: E402
from suites import arith, search  # noqa: E402
from suites.tokenizer_corpus import suite_conversations


def samples(tokenizer, count: int) -> list[TokenizedSample]:
    conversations = [(p.messages(), None) for p in arith.generate(count, seed=11)]
    conversations += [(list(e.messages), search.TOOLS) for e in search.generate(count // 4, seed=11)]
    rendered = [render(tokenizer, messages, tools, append_stop=True) for messages, tools in conversations]
    return [TokenizedSample(r.input_ids, r.loss_mask) for r in rendered]


def plain_step(model, optimizer, batch) -> None:
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    labels = batch.input_ids[:, 1:].masked_fill(batch.loss_mask[:, 1:] == 0, -100)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def timed(steps, run_one) -> tuple[float, int]:
    tokens, started = 0, time.perf_counter()
    for batch in steps:
        run_one(batch)
        tokens += sum(len(sample.input_ids) for sample in batch)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started, tokens


def active_parameters(model) -> int:
    """The parameters one token's forward passes through: routed experts at top-k of n."""
    config, total = model.config, 0
    share = config.num_experts_per_tok / config.n_routed_experts
    for name, parameter in model.named_parameters():
        total += parameter.numel() * (share if ".mlp.experts." in name else 1)
    return int(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--phase", choices=["dense", "sparse"], default="sparse")
    parser.add_argument("--model", choices=sorted(PRESETS), default="glm5-tiny")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H100/H200: 989)")
    parser.add_argument("--losses", action="store_true", help="print our step's losses, one round, no plain loop")
    parser.add_argument("--activation-checkpointing", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    dist = init_distributed()
    tokenizer = train_tokenizer(suite_conversations())
    base = build_model(args.model, tokenizer, seed=0)
    ours = copy.deepcopy(base)
    with tempfile.TemporaryDirectory() as tmp:
        config = SftConfig(run_id="bench", store=tmp, init_checkpoint="-", datasets=["-"],
                           global_batch_size=args.batch, max_steps=args.rounds * args.steps,
                           optimizer={"warmup_steps": min(30, args.rounds * args.steps)},
                           dsa={"dense_steps": 0, "indexer_warmup_steps": 0},
                           compute={"precision": args.precision, "activation_checkpointing": args.activation_checkpointing})
        adapt_model(ours, config.compute)
        shape = step_shape(args.batch, dist.world_size, None, "batch")
        engine = build_engine(ours, config, config.dsa, shape, dist.world_size)
    device, bf16 = engine.device, resolved_precision(args.precision) == "bf16"
    finite = FiniteSteps(skips_allowed=0, stage="bench")
    enter_phase(engine.module, args.phase)
    batches = GlobalBatches(samples(tokenizer, 2000), args.batch, seed=0)
    pad_id = tokenizer.pad_token_id

    def ours_step(batch):
        return train_step(engine, batch, pad_id, args.batch, args.phase, 1.0, finite, 0)

    if args.losses:
        losses = [ours_step(batches.for_step(i, 0, 1))["lm"] for i in range(args.steps)]
        print(json.dumps({"losses": losses, "device": str(device), "precision": "bf16" if bf16 else "fp32",
                          "peak_memory_mb": round(peak_memory_mb(), 1), "model": args.model, "batch": args.batch,
                          "activation_checkpointing": args.activation_checkpointing}))
        return
    plain = copy.deepcopy(base).to(device)
    plain_optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-3, betas=(0.9, 0.95))

    def plain_one(batch):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            plain_step(plain, plain_optimizer, collate(batch, pad_id).to(device))

    ours_rates, plain_rates = [], []
    for round_index in range(args.rounds):
        steps = [batches.for_step(round_index * args.steps + i, 0, 1) for i in range(args.steps)]
        seconds, tokens = timed(steps, ours_step)
        ours_rates.append(tokens / seconds)
        seconds, tokens = timed(steps, plain_one)
        plain_rates.append(tokens / seconds)
    ours_rate = statistics.median(ours_rates)
    result = {
        "model": args.model, "parameters": parameter_count(base), "active_parameters": active_parameters(base),
        "device": str(device), "precision": "bf16" if bf16 else "fp32",
        "ours_tokens_per_s": round(ours_rate, 1),
        "plain_tokens_per_s": round(statistics.median(plain_rates), 1),
        "ratio": round(ours_rate / statistics.median(plain_rates), 3),
        "rounds": args.rounds, "steps_per_round": args.steps, "batch": args.batch, "phase": args.phase,
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
        result["mfu"] = round(6 * active_parameters(base) * ours_rate / (args.peak_tflops * 1e12), 4)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
