"""Training tokens/s of our SFT step against TRL's SFTTrainer and a plain PyTorch loop: same model, same batches,
same attention mode.

Three arms, each on its own copy of the same initial weights, each training on the same batches in the same order
(round r, step i is step r × steps + i of the stage's length-grouped batches, padded, not packed):

- ours: the step stages/sft/train.py runs (DeepSpeed engine, SftObjective's loss on trained positions only, each
  layer's feed-forward on the batch's tokens without their padding (model/padding_free.py), FiniteSteps'
  finiteness check). In sparse mode that is the sparse phase: our tie-stable indexer, sparse-gather
  attention, and the indexer's KL loss trained alongside the LM loss — work the other two arms do not do.
- trl: TRL's `SFTTrainer.train()`, as a TRL user runs it: its own optimizer (`optim`'s default, fused AdamW), its
  chunked LM head (on a GPU over the trained positions only, like ours; on a CPU over every position) with its
  entropy and token-accuracy metrics, its loss logged every step. Padded, as ours' attention: TRL's
  `padding_free` flattens the batch into one sequence, which it supports with FlashAttention 2 or 3 only (GPU
  kernels); on a GPU with those installed it is TRL's best configuration and the comparison to make.
- plain: the textbook loop: `model(..., labels=...).loss` over full logits, backward, clip, AdamW step.

`--attention` puts all three in the same mode (named in every output):

- sparse: the model's DSA indexer picks each query's top-k keys and attention sees only those. trl and plain run
  transformers' own implementation (modeling_glm_moe_dsa: the indexer under no_grad, torch.topk, the selection as a
  mask over SDPA), ours runs its own (model/dsa.py), as the stage does.
- dense: the indexer is off in every arm and attention is SDPA over all causal keys. transformers has no switch for
  that (its attention always runs the indexer), so trl and plain get ours, `set_dense_attention(model, True,
  score_keys=False)`, the stage's dense phase: the same parameters, the indexer skipped, every key selected.

Like for like: one process, one device and thread count; batch = one micro-batch, no gradient accumulation;
precision fp32, or bf16 as each arm runs it (ours: DeepSpeed's bf16 weights with fp32 master weights and optimizer
state; trl and plain: autocast with fp32 weights); AdamW with the same lr, betas (0.9, 0.95), eps 1e-8, no weight
decay, gradient-norm clipping at 1.0 (the stage's default, which ours applies through DeepSpeed) and a constant
learning rate (TRL's Trainer makes a new schedule at every `train()` call, so a warm-up could not carry over
rounds). The loss is trained on the same tokens, ours' loss mask (the assistant's tokens): TRL gets it as `labels`
(-100 elsewhere), pre-tokenized, with `skip_prepare_dataset` so it neither tokenizes, truncates nor drops a row,
which is the mask `assistant_only_loss` would build from a chat template with generation markers; no packing,
sequential sampling, no dataloader workers, activation checkpointing only with `--activation-checkpointing` (TRL
turns it on by default). Ours averages the loss per sample then over samples (SPEC), trl and plain over the batch's
trained tokens: the same cost, slightly different numbers.

TRL is timed from `on_train_begin` to its last step's log, so the trainer's set-up in `train()` (optimizer and
accelerator preparation, once per run in a real one) is left out and each step's batch collation, device transfer
and logging are in, as ours' and plain's are. TRL's console printer is removed (the JSON goes to stdout); nothing
is evaluated or saved in any arm.

Rounds alternate (bench/rounds.py), each arm running `--steps` steps per round; each arm's tokens/s (unpadded
tokens) and the per-round ratios ours/trl and ours/plain are reported as median with min and max, never best-of,
with the load average and versions. Each arm's loss at its first and last step shows it trains; the first steps
(same weights, same batch) must agree within LOSS_AGREEMENT, else a warning goes to stderr and into the JSON. On a
GPU it also gives each arm's model FLOPs utilisation: 6 × the parameters a token passes through (routed experts
counted at top-k of n) × tokens/s over `--peak-tflops`. `--losses` prints our step's losses and the process's
peak memory instead (bench/gpu_check.sh compares fp32 on the GPU with the CPU).

    .venv/bin/python bench/sft_throughput.py --rounds 5 --steps 10 --attention sparse
    .venv/bin/python bench/sft_throughput.py --model glm5-small --precision bf16 --batch 64 --attention dense
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from model.device import resolved_precision  # noqa: E402
from model.dsa import set_dense_attention  # noqa: E402
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
from suites.tokenizer_corpus import suite_conversations  # noqa: E402

BETAS, GRAD_CLIP = (0.9, 0.95), 1.0
# The arms' first-step losses, relative spread (0.2% on glm5-tiny in fp32). The same weights on the same batch
# differ by the loss's averaging (ours per sample, the others per token: trl and plain agree to 1e-6 in fp32), the
# sparse top-k's ties (ours keeps the newest keys, torch.topk any) and bf16 rounding; other weights or precision
# are beyond it. At random initialisation every token's loss is near ln(vocab), so another batch or mask would
# pass: the last-step losses show those.
LOSS_AGREEMENT = 0.02


def samples(tokenizer, count: int) -> list[TokenizedSample]:
    conversations = [(p.messages(), None) for p in arith.generate(count, seed=11)]
    conversations += [(list(e.messages), search.TOOLS) for e in search.generate(count // 4, seed=11)]
    rendered = [render(tokenizer, messages, tools, append_stop=True) for messages, tools in conversations]
    return [TokenizedSample(r.input_ids, r.loss_mask) for r in rendered]


def active_parameters(model) -> int:
    """The parameters one token's forward passes through: routed experts at top-k of n."""
    config, total = model.config, 0
    share = config.num_experts_per_tok / config.n_routed_experts
    for name, parameter in model.named_parameters():
        total += parameter.numel() * (share if ".mlp.experts." in name else 1)
    return int(total)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tokens_in(steps: list[list[TokenizedSample]]) -> int:
    return sum(len(sample.input_ids) for batch in steps for sample in batch)


def ours_arm(model, args, dist, pad_id: int):
    """Our stage's step on a DeepSpeed engine: (runner of one round's steps → their LM losses, engine)."""
    with tempfile.TemporaryDirectory() as tmp:
        # The stage's dense and sparse phases are the two attention modes; no indexer warm-up, a constant rate.
        config = SftConfig(run_id="bench", store=tmp, init_checkpoint="-", datasets=["-"],
                           global_batch_size=args.batch, max_steps=args.rounds * args.steps,
                           optimizer={"lr": args.lr, "warmup_steps": 0, "grad_clip": GRAD_CLIP}, min_lr_ratio=1.0,
                           dsa={"dense_steps": 0, "indexer_warmup_steps": 0, "indexer_lr": args.lr},
                           compute={"precision": args.precision, "activation_checkpointing": args.activation_checkpointing})
        adapt_model(model, config.compute)
        shape = step_shape(args.batch, dist.world_size, None, "batch")
        engine = build_engine(model, config, config.dsa, shape, dist.world_size)
    enter_phase(engine.module, args.attention)
    finite = FiniteSteps(skips_allowed=0, stage="bench")

    def run(steps):
        return [train_step(engine, batch, pad_id, args.batch, args.attention, 1.0, finite, 0)["lm"] for batch in steps]

    return run, engine


def plain_arm(model, args, device, bf16: bool, pad_id: int):
    """The textbook loop: full logits, transformers' own token-mean loss, clip, AdamW."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=BETAS, weight_decay=0.0)

    def step(samples_: list[TokenizedSample]) -> float:
        batch = collate(samples_, pad_id).to(device)
        labels = batch.input_ids.masked_fill(batch.loss_mask == 0, -100)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=labels,
                         use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return lambda steps: [step(batch) for batch in steps]


def trl_dataset(steps: list[list[TokenizedSample]]):
    """One round's samples in step order, pre-tokenized, labels -100 outside ours' loss mask."""
    from datasets import Dataset

    rows = [sample for batch in steps for sample in batch]
    return Dataset.from_dict({
        "input_ids": [sample.input_ids for sample in rows],
        "labels": [[token if trained else -100 for token, trained in zip(sample.input_ids, sample.loss_mask, strict=True)]
                   for sample in rows],
    })


def trl_arm(model, tokenizer, args, bf16: bool, first_steps, output_dir: str):
    """TRL's SFTTrainer; each round is one `train()` of `--steps` steps over that round's batches, on the same
    model and optimizer. Returns (runner of one round → (seconds, its losses), trainer)."""
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Clock(TrainerCallback):
        """From the start of the training loop to the log of its last step."""

        def on_train_begin(self, *_, **__):
            synchronize()
            self.started, self.seconds, self.losses = time.perf_counter(), None, []

        def on_log(self, _args, state, _control, logs=None, **__):
            if logs and "loss" in logs:
                self.losses.append(logs["loss"])
                if len(self.losses) == state.max_steps:
                    synchronize()
                    self.seconds = time.perf_counter() - self.started

    config = SFTConfig(
        output_dir=output_dir, report_to="none", save_strategy="no", eval_strategy="no", logging_steps=1,
        disable_tqdm=True, max_steps=args.steps, per_device_train_batch_size=args.batch, gradient_accumulation_steps=1,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, adam_beta1=BETAS[0],
        adam_beta2=BETAS[1], adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=GRAD_CLIP, bf16=bf16,
        activation_checkpointing=args.activation_checkpointing, train_sampling_strategy="sequential",
        dataloader_num_workers=0, packing=False, max_length=None, dataset_kwargs={"skip_prepare_dataset": True},
    )
    clock = Clock()
    trainer = SFTTrainer(model=model, args=config, train_dataset=trl_dataset(first_steps), processing_class=tokenizer,
                         callbacks=[clock])
    trainer.remove_callback(PrinterCallback)

    def run(steps):
        trainer.train_dataset = trl_dataset(steps)
        trainer.train()
        return clock.seconds, clock.losses

    return run, trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", choices=["sparse", "dense"], default="sparse",
                        help="sparse: the DSA indexer's top-k in every arm; dense: the indexer off in every arm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps per arm per round")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4,
                        help="constant in every arm: a few steps show the loss falling, and no warm-up is needed")
    parser.add_argument("--model", choices=sorted(PRESETS), default="glm5-tiny")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H100/H200: 989)")
    parser.add_argument("--losses", action="store_true", help="print our step's losses, one round, no other arm")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the JSON document here")
    args = parser.parse_args()
    if args.rounds < 3 and not args.losses:
        parser.error("--rounds: at least 3, so that the median and the range say something")
    # TRL trains bf16 on a CPU only with `use_cpu`, and then accelerate takes DeepSpeed's process group for a
    # distributed run and wraps its model in DDP: an overhead the other arms do not have.
    if resolved_precision(args.precision) == "bf16" and not torch.cuda.is_available() and not args.losses:
        parser.error("--precision bf16 needs a GPU (on a CPU, TRL's arm would run under DDP); use fp32")

    torch.manual_seed(0)
    dist = init_distributed()
    tokenizer = train_tokenizer(suite_conversations())
    pad_id = tokenizer.pad_token_id
    base = build_model(args.model, tokenizer, seed=0)
    batches = GlobalBatches(samples(tokenizer, 2000), args.batch, seed=0)
    round_steps = [[batches.for_step(r * args.steps + i, 0, 1) for i in range(args.steps)] for r in range(args.rounds)]
    ours, engine = ours_arm(copy.deepcopy(base), args, dist, pad_id)
    device, bf16 = engine.device, resolved_precision(args.precision) == "bf16"
    precision = "bf16" if bf16 else "fp32"

    if args.losses:
        print(json.dumps({"losses": ours(round_steps[0]), "attention": args.attention, "device": str(device),
                          "precision": precision, "peak_memory_mb": round(peak_memory_mb(), 1), "model": args.model,
                          "batch": args.batch, "activation_checkpointing": args.activation_checkpointing}))
        return

    # trl and plain start from the stock model: in sparse mode transformers' indexer and top-k mask as they are.
    theirs = {name: copy.deepcopy(base) for name in ("trl", "plain")}
    if args.attention == "dense":
        for model in theirs.values():
            set_dense_attention(model, True, score_keys=False)
    with tempfile.TemporaryDirectory() as output_dir:
        trl, trainer = trl_arm(theirs["trl"], tokenizer, args, bf16, round_steps[0], output_dir)
        plain = plain_arm(theirs["plain"], args, device, bf16, pad_id)

        def timed(run):
            def one_round(index: int) -> dict:
                synchronize()
                started = time.perf_counter()
                losses = run(round_steps[index])
                synchronize()
                return {"seconds": time.perf_counter() - started, "losses": losses}
            return one_round

        def trl_round(index: int) -> dict:
            seconds, losses = trl(round_steps[index])
            return {"seconds": seconds, "losses": losses}

        loads = machine()
        runs = alternate({"ours": timed(ours), "trl": trl_round, "plain": timed(plain)}, args.rounds)

    tokens = [tokens_in(steps) for steps in round_steps]
    rates = {name: [t / run["seconds"] for t, run in zip(tokens, arm_runs, strict=True)] for name, arm_runs in runs.items()}
    first = {name: arm_runs[0]["losses"][0] for name, arm_runs in runs.items()}
    last = {name: arm_runs[-1]["losses"][-1] for name, arm_runs in runs.items()}
    disagreement = (max(first.values()) - min(first.values())) / min(first.values())
    arms = {name: {"tokens_per_s": spread(rates[name]), "first_loss": first[name], "last_loss": last[name],
                   "trains": last[name] < first[name]} for name in runs}
    if device.type == "cuda":
        for arm in arms.values():
            arm["mfu"] = 6 * active_parameters(base) * arm["tokens_per_s"]["median"] / (args.peak_tflops * 1e12)
    result = {
        "attention": args.attention, "model": args.model, "parameters": parameter_count(base),
        "active_parameters": active_parameters(base), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "precision": precision,
        "batch": args.batch, "rounds": args.rounds, "steps_per_round": args.steps, "threads": torch.get_num_threads(),
        "tokens_per_round": tokens, "activation_checkpointing": args.activation_checkpointing,
        "optimizer": {"lr": args.lr, "schedule": "constant", "betas": BETAS, "weight_decay": 0.0, "grad_clip": GRAD_CLIP,
                      "trl_optim": trainer.args.optim.value, "ours": "torch AdamW under DeepSpeed",
                      "plain": "torch AdamW"},
        # How accelerate set TRL up from the environment: "NO" and the bare model class are a lone process, no DDP.
        "trl_accelerate": {"distributed_type": trainer.accelerator.distributed_type.value,
                           "model": type(trainer.model_wrapped).__name__},
        "arms": arms,
        "ratios": {"ours/trl": ratio_spread(rates["ours"], rates["trl"]),
                   "ours/plain": ratio_spread(rates["ours"], rates["plain"])},
        "first_losses_agree": {"within": disagreement <= LOSS_AGREEMENT, "relative_spread": disagreement,
                               "tolerance": LOSS_AGREEMENT},
        "machine": loads,
    }
    if disagreement > LOSS_AGREEMENT:
        print(f"WARNING ({args.attention} attention): the arms' first-step losses {first} differ by "
              f"{disagreement:.1%}, more than {LOSS_AGREEMENT:.0%}: they are not training the same model on the same "
              f"batch, and their tokens/s do not compare", file=sys.stderr)
    untrained = [name for name, arm in arms.items() if not arm["trains"]]
    if untrained:
        print(f"WARNING ({args.attention} attention): {untrained} did not lower the loss from the first step to the "
              f"last", file=sys.stderr)
    document = json.dumps(result, indent=2)
    print(document)
    if args.out:
        args.out.write_text(document + "\n")


if __name__ == "__main__":
    main()
