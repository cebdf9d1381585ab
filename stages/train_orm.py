"""ORM trainer: `python -m stages.train_orm --config run.json`, alone or under torchrun / deepspeed.

Reads a committed checkpoint (the trunk) and preference@1 datasets, puts a scalar head on the trunk
and trains both with the Bradley–Terry loss on (chosen, rejected) pairs, with sparse attention on and
the DSA indexer frozen as in RL. Reports held-out pairwise accuracy (overall and per domain) and
commits the reward model with its lineage; `rewards.orm.OrmScore` scores with it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import torch

from infra.publish import data_input
from model.presets import load_model
from model.reward_model import ScalarRewardModel
from stages import checkpoints
from stages.batches import GlobalBatches
from stages.distributed import all_mean
from stages.lineage import stage_lineage
from stages.losses import bradley_terry_loss, pairwise_accuracy
from stages.orm_config import TrainOrmConfig
from stages.orm_data import PairSample, collate_pairs, render_pairs
from stages.rl_trainer import rl_training_engine
from stages.sft_data import load_split
from stages.stage_inputs import stage_main, start_stage


def run(config: TrainOrmConfig) -> str:
    stage = start_stage(config)
    if isinstance(stage, str):  # a previous run committed the output
        return stage
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    tokenizer = stage.tokenizer()
    pad_id = tokenizer.pad_token_id
    model = ScalarRewardModel(load_model(stage.init_dir), seed=config.seed)

    train = render_pairs(load_split(stage.datasets, "train", workdir, config.dataset_contract), tokenizer,
                         config.max_seq_len)
    heldout = render_pairs(load_split(stage.datasets, "test", workdir, config.dataset_contract), tokenizer,
                           config.max_seq_len)
    events.emit("data", train_pairs=len(train.pairs), heldout_pairs=len(heldout.pairs),
                dropped_too_long=train.dropped_too_long + heldout.dropped_too_long)

    engine = rl_training_engine(model, lr=config.lr, warmup_steps=config.warmup_steps,
                                global_batch=config.global_batch_size, world_size=dist.world_size,
                                zero_stage=config.zero_stage, grad_clip=config.grad_clip)
    start_step, history, resumed_from = checkpoints.resume_latest(
        engine, stage.store, config.resume_prefix, workdir / "resume", dist.local_rank == 0, events)

    batches = GlobalBatches(train.pairs, config.global_batch_size, config.seed)
    for step in range(start_step, config.max_steps):
        pairs = batches.for_step(step, dist.rank, dist.world_size)
        started = time.monotonic()
        engine.train()
        input_ids, attention_mask = collate_pairs(pairs, pad_id)
        chosen, rejected = engine(input_ids, attention_mask).chunk(2)
        loss = bradley_terry_loss(chosen, rejected)
        engine.backward(loss)
        engine.step()
        record = {
            "step": step + 1, "loss": all_mean(loss.item()), "lr": engine.get_lr()[0],
            "train_accuracy": all_mean(pairwise_accuracy(chosen.detach(), rejected.detach())),
            "margin": all_mean((chosen - rejected).mean().item()),
            "pairs_per_s": all_mean(len(pairs) / (time.monotonic() - started)) * dist.world_size,
            "trained_tokens": int(all_mean(float(attention_mask.sum())) * dist.world_size),
        }
        if (step + 1) % config.eval_every == 0 or step + 1 == config.max_steps:
            record |= heldout_metrics(engine.module, heldout.pairs, pad_id, config.eval_batch_size)
        history.append(record)
        events.emit("step", total=config.max_steps, **record)
        if (step + 1) % config.checkpoint_every == 0 and step + 1 < config.max_steps:
            uri = save_and_commit(engine, tokenizer, config, stage, step + 1, history,
                                  checkpoints.step_artifact_name(config.resume_prefix, step + 1))
            events.emit("committed", step=step + 1, checkpoint=uri)

    uri = save_and_commit(engine, tokenizer, config, stage, config.max_steps, history, config.output_name)
    events.emit("done", checkpoint=uri, resumed_from=resumed_from, already_committed=False,
                **{k: v for k, v in history[-1].items() if k.startswith("heldout_")})
    return uri


@torch.no_grad()
def heldout_metrics(model: ScalarRewardModel, pairs: list[PairSample], pad_id: int, batch_size: int) -> dict:
    """Pairwise accuracy over every held-out pair, and per domain (`heldout_accuracy/<domain>`).
    Every rank scores all of them: the numbers are the same on each, no gather needed."""
    model.eval()
    chosen, rejected = [], []
    for start in range(0, len(pairs), batch_size):
        scores_chosen, scores_rejected = model(*collate_pairs(pairs[start:start + batch_size], pad_id)).chunk(2)
        chosen.append(scores_chosen)
        rejected.append(scores_rejected)
    model.train()
    chosen, rejected = torch.cat(chosen), torch.cat(rejected)
    by_domain = defaultdict(list)
    for index, pair in enumerate(pairs):
        by_domain[pair.domain].append(index)
    metrics = {"heldout_accuracy": pairwise_accuracy(chosen, rejected),
               "heldout_margin": (chosen - rejected).mean().item()}
    for domain, indices in sorted(by_domain.items()):
        metrics[f"heldout_accuracy/{domain}"] = pairwise_accuracy(chosen[indices], rejected[indices])
    return metrics


def save_and_commit(engine, tokenizer, config: TrainOrmConfig, stage, step: int, history: list[dict],
                    name: str) -> str | None:
    local = stage.workdir.parent / "commit" / f"step-{step}"
    checkpoints.save_local(engine, engine.module, tokenizer, local, step, {"history": history}, stage.dist.is_main)
    if stage.dist.is_main:
        (local / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in history))
    evaluated = [r for r in history if "heldout_accuracy" in r]
    lineage = stage_lineage(
        name=f"orm {config.run_id} step {step}", config=config.model_dump(mode="json"), seed=config.seed,
        init=stage.init, inputs=[data_input(d, None, config.dataset_contract.id) for d in stage.datasets],
        provenance=config.provenance,
        eval_summary={k: v for k, v in evaluated[-1].items() if k.startswith("heldout_")} if evaluated else {},
    )
    return checkpoints.commit(stage.store, name, local, lineage, stage.dist.is_main)


def main(argv: list[str] | None = None) -> None:
    stage_main(TrainOrmConfig, run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
