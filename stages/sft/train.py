"""SFT trainer: `python -m stages.sft.train --config run.json`, alone or under torchrun / deepspeed.

Reads a committed initial checkpoint and chat@1 datasets, trains with the masked SFT loss on a
DeepSpeed engine while training the DSA indexer GLM-5's way (dense → indexer warm-up → sparse),
commits resume state every `checkpoint_every` steps and the final checkpoint with its lineage.
Re-running the same config resumes from the last committed step; a finished run is a no-op.
"""

from __future__ import annotations

import torch

from model.dsa import install_dsa_indexers
from model.presets import load_model
from stages.common.batches import GlobalBatches, TokenizedSample
from stages.common.checkpointer import StageCheckpointer
from stages.common.distributed import Dist, all_mean
from stages.common.finite import FiniteSteps
from stages.common.inputs import StageInputs, load_split
from stages.common.mtp_training import mtp_training, trained_apart
from stages.common.router_balance import RouterBalance
from stages.common.stage_main import stage_main
from stages.common.timing import timed
from stages.common.training_engine import StepShape, adapt_model, deepspeed_engine, peak_memory_mb, step_shape
from stages.sft.config import DsaSchedule, SftConfig
from stages.sft.data import render_rows
from stages.sft.objective import SftObjective
from stages.sft.schedule import dsa_phase, main_lr_multiplier
from stages.sft.step import enter_phase, heldout_loss, train_step


def train(config: SftConfig, stage: StageInputs) -> str:
    dist, events = stage.dist, stage.events
    tokenizer = stage.tokenizer()
    model = load_model(stage.init_dir)
    balance = RouterBalance(model, config.router_balancing)
    # A model without DSA's indexer (Glm4MoeForCausalLM) trains dense throughout: the DSA steps are skipped.
    schedule = config.dsa if install_dsa_indexers(model) else DsaSchedule(dense_steps=config.max_steps,
                                                                           indexer_warmup_steps=0)

    train_rows, test_rows = load_split(stage.datasets, "train", stage.workdir), load_split(stage.datasets, "test", stage.workdir)
    samples = render_rows(train_rows, tokenizer, config.thinking_mix, config.seed, config.max_seq_len)
    heldout = render_rows(test_rows, tokenizer, config.thinking_mix, config.seed, config.max_seq_len)
    heldout_samples = heldout.samples[: config.heldout.samples]
    events.emit("data", train_samples=len(samples.samples), dropped_too_long=samples.dropped_too_long,
                modes=samples.modes, heldout_samples=len(heldout_samples))

    shape = step_shape(config.global_batch_size, dist.world_size, config.compute.micro_batch_size, "global_batch_size")
    adapt_model(model, config.compute)
    engine = build_engine(model, config, schedule, shape, dist.world_size)
    mtp = mtp_training(model, config.mtp, config.optimizer)
    checkpointer = StageCheckpointer(config, stage, engine, model, tokenizer)
    start_step = checkpointer.resume()
    finite = FiniteSteps(config.optimizer.nonfinite_skips, config.stage_name)

    batches = GlobalBatches(samples.samples, config.global_batch_size, config.seed)
    pad_id = tokenizer.pad_token_id
    phase = None
    for step in range(start_step, config.max_steps):
        if (step_phase := dsa_phase(step, schedule)) != phase:
            phase = step_phase
            enter_phase(engine.module, phase)
        step_samples = batches.for_step(step, dist.rank, dist.world_size)
        with timed() as training:
            losses = train_step(engine, step_samples, pad_id, shape.micro, phase, schedule.indexer_loss_weight, finite,
                                step + 1, mtp)
        record = step_metrics(step + 1, phase, losses, engine, step_samples, training.seconds, dist)
        record |= balance.after_step(last=step + 1 == config.max_steps)
        if (step + 1) % config.heldout.every == 0 or step + 1 == config.max_steps:
            record["heldout_loss"] = heldout_loss(engine.module, heldout_samples, pad_id,
                                                  config.heldout.batch_size or shape.micro, engine.device)
        checkpointer.end_of_step(record)
    return checkpointer.finish()


def build_engine(model, config: SftConfig, schedule: DsaSchedule, shape: StepShape, world_size: int):
    """A DeepSpeed engine training `model` (a causal LM) through an SftObjective, on `schedule`'s DSA phases.
    The indexer trains in SFT even where LoRA freezes the model's own weights."""
    settings = config.optimizer
    indexer_params = {id(p) for indexer in install_dsa_indexers(model) for p in indexer.parameters()}
    for parameter in model.parameters():
        if id(parameter) in indexer_params:
            parameter.requires_grad_(True)
    apart = indexer_params | trained_apart(model)
    groups = [{"params": [p for p in model.parameters() if id(p) not in apart and p.requires_grad],
               "lr": settings.lr}]
    lambdas = [lambda step: main_lr_multiplier(step, config.max_steps, settings.warmup_steps, config.min_lr_ratio, schedule)]
    if indexer_params:  # the indexer learns at its own constant rate; a model without one has no such group
        groups.append({"params": [p for p in model.parameters() if id(p) in indexer_params], "lr": schedule.indexer_lr})
        lambdas.append(lambda step: 1.0)
    optimizer = torch.optim.AdamW(groups, weight_decay=settings.weight_decay, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
    return deepspeed_engine(SftObjective(model), optimizer, scheduler, shape, world_size, settings, config.compute)


def step_metrics(step: int, phase: str, losses: dict, engine, samples: list[TokenizedSample], seconds: float,
                 dist: Dist) -> dict:
    """One step's record, averaged over ranks (token counts summed)."""
    tokens = sum(len(sample.input_ids) for sample in samples)
    trained = sum(sum(sample.loss_mask) for sample in samples)
    return {
        "step": step, "phase": phase,
        "loss": all_mean(losses["lm"]), "indexer_loss": all_mean(losses["indexer"]),
        **({"mtp_loss": all_mean(losses["mtp"])} if "mtp" in losses else {}),
        "lr": engine.get_lr()[0], "trained_tokens": int(all_mean(trained) * dist.world_size),
        "tokens_per_s": all_mean(tokens / seconds) * dist.world_size, "peak_memory_mb": all_mean(peak_memory_mb()),
    }


def main(argv: list[str] | None = None) -> None:
    stage_main(SftConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
