"""Training tokens/s of our SFT step against a plain PyTorch loop on the same model and batches.

Same process, same model weights, same batches, alternating rounds so that machine noise hits both
sides alike. Our step is what stages/sft/train.py runs in `--phase` (DeepSpeed engine, masked SFT loss with
the LM head on trained positions only; in the sparse phase also top-k attention and the DSA indexer
loss, with eager attention); the plain loop is the textbook one (AdamW, cross-entropy over every
position, default attention, dense).

    .venv/bin/python bench/sft_throughput.py --rounds 5 --steps 10
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

from model.presets import build_model  # noqa: E402
from model.renderer import render  # noqa: E402
from model.tokenizer import train_tokenizer  # noqa: E402
from stages.common.batches import GlobalBatches, TokenizedSample, collate  # noqa: E402
from stages.common.distributed import init_distributed  # noqa: E402
from stages.common.finite import FiniteSteps  # noqa: E402
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
        tokens += batch.input_ids.numel()
    return time.perf_counter() - started, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--phase", choices=["dense", "sparse"], default="sparse")
    args = parser.parse_args()

    torch.manual_seed(0)
    dist = init_distributed()
    tokenizer = train_tokenizer(suite_conversations())
    base = build_model("glm5-tiny", tokenizer, seed=0)
    plain = copy.deepcopy(base)
    plain_optimizer = torch.optim.AdamW(plain.parameters(), lr=1e-3, betas=(0.9, 0.95))
    ours = copy.deepcopy(base)
    with tempfile.TemporaryDirectory() as tmp:
        config = SftConfig(run_id="bench", store=tmp, init_checkpoint="-", datasets=["-"],
                           global_batch_size=args.batch, max_steps=args.rounds * args.steps,
                           optimizer={"warmup_steps": min(30, args.rounds * args.steps)},
                           dsa={"dense_steps": 0, "indexer_warmup_steps": 0})
        engine = build_engine(ours, config, dist.world_size)
    finite = FiniteSteps(skips_allowed=0, stage="bench")
    enter_phase(engine.module, args.phase)
    batches = GlobalBatches(samples(tokenizer, 2000), args.batch, seed=0)
    ours_rates, plain_rates = [], []
    for round_index in range(args.rounds):
        steps = [collate(batches.for_step(round_index * args.steps + i, 0, 1), tokenizer.pad_token_id)
                 for i in range(args.steps)]
        seconds, tokens = timed(steps, lambda batch: train_step(engine, batch, args.phase, 1.0, finite, 0))
        ours_rates.append(tokens / seconds)
        seconds, tokens = timed(steps, lambda batch: plain_step(plain, plain_optimizer, batch))
        plain_rates.append(tokens / seconds)
    result = {
        "ours_tokens_per_s": round(statistics.median(ours_rates), 1),
        "plain_tokens_per_s": round(statistics.median(plain_rates), 1),
        "ratio": round(statistics.median(ours_rates) / statistics.median(plain_rates), 3),
        "rounds": args.rounds, "steps_per_round": args.steps, "batch": args.batch, "phase": args.phase,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
