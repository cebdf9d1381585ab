"""SFT trainer: `python -m stages.sft --config run.json`, alone or under torchrun / deepspeed.

Reads a committed initial checkpoint and chat@1 datasets, trains with the masked SFT loss on a
DeepSpeed engine while training the DSA indexer GLM-5's way (dense → indexer warm-up → sparse),
commits resume state every `checkpoint_every` steps and the final checkpoint with its lineage.
Re-running the same config resumes from the last committed step; a finished run is a no-op.
"""

from __future__ import annotations

import json
import time

import torch

from data_contracts import CHAT_V1
from infra.publish import data_input
from model.dsa import install_dsa_indexers
from model.presets import load_model
from stages import checkpoints
from stages.batches import GlobalBatches, collate
from stages.distributed import all_mean, deepspeed_engine
from stages.stage_inputs import stage_main, start_stage
from stages.lineage import stage_lineage
from stages.schedule import dsa_phase, main_lr_multiplier
from stages.sft_config import SftConfig
from stages.sft_data import load_split, render_rows
from stages.sft_objective import SftObjective
from stages.sft_step import enter_phase, heldout_loss, train_step


def build_engine(model, config: SftConfig, world_size: int):
    """A DeepSpeed engine training `model` (a causal LM) through an SftObjective."""
    indexer_params = {id(p) for indexer in install_dsa_indexers(model) for p in indexer.parameters()}
    groups = [
        {"params": [p for p in model.parameters() if id(p) not in indexer_params], "lr": config.lr},
        {"params": [p for p in model.parameters() if id(p) in indexer_params], "lr": config.dsa.indexer_lr},
    ]
    optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay, betas=(0.9, 0.95))
    lambdas = [
        lambda step: main_lr_multiplier(step, config.max_steps, config.warmup_steps, config.min_lr_ratio, config.dsa),
        lambda step: 1.0,
    ]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
    return deepspeed_engine(SftObjective(model), optimizer, scheduler, config.global_batch_size, world_size,
                            config.zero_stage, config.grad_clip)


def run(config: SftConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):  # a previous run committed the output
        return stage
    dist, events = stage.dist, stage.events
    store, workdir, init, init_dir, datasets = stage.store, stage.workdir, stage.init, stage.init_dir, stage.datasets
    tokenizer = stage.tokenizer()
    model = load_model(init_dir)
    install_dsa_indexers(model)

    train_rows, test_rows = load_split(datasets, "train", workdir), load_split(datasets, "test", workdir)
    train = render_rows(train_rows, tokenizer, config.thinking_mix, config.seed, config.max_seq_len)
    heldout = render_rows(test_rows, tokenizer, config.thinking_mix, config.seed, config.max_seq_len)
    heldout_samples = heldout.samples[: config.eval_samples]
    events.emit("data", train_samples=len(train.samples), dropped_too_long=train.dropped_too_long,
                modes=train.modes, heldout_samples=len(heldout_samples))

    engine = build_engine(model, config, dist.world_size)
    start_step, history, resumed_from = checkpoints.resume_latest(
        engine, store, config.resume_prefix, workdir / "resume", dist.local_rank == 0, events
    )

    batches = GlobalBatches(train.samples, config.global_batch_size, config.seed)
    pad_id = tokenizer.pad_token_id
    phase = None
    for step in range(start_step, config.max_steps):
        if (step_phase := dsa_phase(step, config.dsa)) != phase:
            phase = step_phase
            enter_phase(engine.module, phase)
        batch = collate(batches.for_step(step, dist.rank, dist.world_size), pad_id)
        started = time.monotonic()
        losses = train_step(engine, batch, phase, config.dsa.indexer_loss_weight)
        seconds = time.monotonic() - started
        record = {
            "step": step + 1, "phase": phase,
            "loss": all_mean(losses["lm"]), "indexer_loss": all_mean(losses["indexer"]),
            "lr": engine.get_lr()[0], "trained_tokens": int(all_mean(batch.trained_tokens) * dist.world_size),
            "tokens_per_s": all_mean(batch.input_ids.numel() / seconds) * dist.world_size,
        }
        if (step + 1) % config.eval_every == 0 or step + 1 == config.max_steps:
            record["heldout_loss"] = heldout_loss(engine.module, heldout_samples, pad_id, config.global_batch_size)
        history.append(record)
        events.emit("step", total=config.max_steps, **record)
        if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.max_steps:
            uri = save_and_commit(engine, tokenizer, config, store, step + 1, history, init, datasets, workdir, dist,
                                  name=checkpoints.step_artifact_name(config.resume_prefix, step + 1))
            events.emit("committed", step=step + 1, checkpoint=uri)

    uri = save_and_commit(engine, tokenizer, config, store, config.max_steps, history, init, datasets, workdir, dist,
                          name=config.output_name)
    events.emit("done", checkpoint=uri, resumed_from=resumed_from, already_committed=False)
    return uri


def save_and_commit(engine, tokenizer, config, store, step, history, init, datasets, workdir, dist, name) -> str | None:
    """Every rank saves its shards; rank 0 commits the directory with its lineage (others get None)."""
    local = workdir.parent / "commit" / f"step-{step}"
    checkpoints.save_local(engine, engine.module.causal_lm, tokenizer, local, step, {"history": history}, dist.is_main)
    if dist.is_main:
        (local / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in history))
    heldout = [r["heldout_loss"] for r in history if "heldout_loss" in r]
    lineage = stage_lineage(
        name=f"sft {config.run_id} step {step}", config=config.model_dump(mode="json"), seed=config.seed,
        init=init, inputs=[data_input(d, None, CHAT_V1.id) for d in datasets], provenance=config.provenance,
        eval_summary={"heldout_loss": heldout[-1]} if heldout else {},
    )
    return checkpoints.commit(store, name, local, lineage, dist.is_main)


def main(argv: list[str] | None = None) -> None:
    stage_main(SftConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
