"""ORM trainer: `python -m stages.orm.train --config run.json`, alone or under torchrun / deepspeed.

Reads a committed checkpoint (the trunk) and preference@1 datasets, puts a scalar head on the trunk
and trains both with the Bradley–Terry loss on (chosen, rejected) pairs, with sparse attention on and
the DSA indexer frozen as in RL. Reports held-out pairwise accuracy (overall and per domain) and
commits the reward model with its lineage; `rewards.orm.OrmScore` scores with it.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from model.presets import load_model
from model.reward_model import ScalarRewardModel
from stages.common.batches import GlobalBatches
from stages.common.checkpointer import StageCheckpointer
from stages.common.distributed import Dist, all_mean
from stages.common.finite import FiniteSteps
from stages.common.inputs import StageInputs, load_split
from stages.common.micro_batches import micro_slices
from stages.common.policy import rl_training_engine
from stages.common.stage_main import stage_main
from stages.common.timing import timed
from stages.common.training_engine import peak_memory_mb, step_shape
from stages.orm.config import TrainOrmConfig
from stages.orm.data import PairSample, collate_pairs, render_pairs
from stages.orm.loss import bradley_terry_loss, pairwise_accuracy


def train(config: TrainOrmConfig, stage: StageInputs) -> str:
    dist, events, workdir = stage.dist, stage.events, stage.workdir
    tokenizer = stage.tokenizer()
    pad_id = tokenizer.pad_token_id
    model = ScalarRewardModel(load_model(stage.init_dir), seed=config.seed)

    train_pairs = render_pairs(load_split(stage.datasets, "train", workdir, config.dataset_contract), tokenizer,
                               config.max_seq_len)
    heldout = render_pairs(load_split(stage.datasets, "test", workdir, config.dataset_contract), tokenizer,
                           config.max_seq_len)
    events.emit("data", train_pairs=len(train_pairs.pairs), heldout_pairs=len(heldout.pairs),
                dropped_too_long=train_pairs.dropped_too_long + heldout.dropped_too_long)

    shape = step_shape(config.global_batch_size, dist.world_size, config.compute.micro_batch_size, "global_batch_size")
    engine = rl_training_engine(model, config.optimizer, config.compute, shape, dist.world_size)
    checkpointer = StageCheckpointer(config, stage, engine, engine.module, tokenizer)
    start_step = checkpointer.resume()
    finite = FiniteSteps(config.optimizer.nonfinite_skips, config.stage_name)

    batches = GlobalBatches(train_pairs.pairs, config.global_batch_size, config.seed)
    for step in range(start_step, config.max_steps):
        pairs = batches.for_step(step, dist.rank, dist.world_size)
        with timed() as training:
            engine.train()
            loss, chosen, rejected, tokens = pairs_step(engine, pairs, pad_id, shape.micro, finite, step + 1)
        record = step_metrics(step + 1, loss, engine.get_lr()[0], chosen, rejected, len(pairs), tokens, training.seconds,
                              dist)
        if (step + 1) % config.heldout.every == 0 or step + 1 == config.max_steps:
            record |= heldout_metrics(engine.module, heldout.pairs[: config.heldout.samples], pad_id,
                                      config.heldout.batch_size or config.global_batch_size, engine.device)
        checkpointer.end_of_step(record)
    return checkpointer.finish()


def step_metrics(step: int, loss: float, lr: float, chosen: torch.Tensor, rejected: torch.Tensor, pairs: int,
                 tokens: int, seconds: float, dist: Dist) -> dict:
    """One step's record, averaged over ranks (counts summed); `chosen` and `rejected` are this rank's scores."""
    return {
        "step": step, "loss": all_mean(loss), "lr": lr,
        "train_accuracy": all_mean(pairwise_accuracy(chosen, rejected)),
        "margin": all_mean((chosen - rejected).mean().item()),
        "pairs_per_s": all_mean(pairs / seconds) * dist.world_size,
        "trained_tokens": int(all_mean(float(tokens)) * dist.world_size),
        "peak_memory_mb": all_mean(peak_memory_mb()),
    }


def pairs_step(engine, pairs: list[PairSample], pad_id: int, micro: int, finite: FiniteSteps, step: int):
    """One optimizer step on this rank's `pairs`, `micro` at a time: the step's loss, the scores of the chosen
    and the rejected replies, and the tokens scored. The Bradley–Terry loss is a mean over pairs: each
    micro-batch's weighs by its share of them."""
    chosen, rejected, tokens = [], [], 0

    def micro_losses():
        nonlocal tokens
        for part in micro_slices(len(pairs), micro):
            input_ids, attention_mask = (t.to(engine.device) for t in collate_pairs(pairs[part], pad_id))
            scores_chosen, scores_rejected = engine(input_ids, attention_mask).chunk(2)
            chosen.append(scores_chosen.detach())
            rejected.append(scores_rejected.detach())
            tokens += int(attention_mask.sum())
            yield bradley_terry_loss(scores_chosen, scores_rejected) * (part.stop - part.start) / len(pairs)

    loss = finite.step(engine, micro_losses(), step)
    return loss, torch.cat(chosen).cpu(), torch.cat(rejected).cpu(), tokens


@torch.no_grad()
def heldout_metrics(model: ScalarRewardModel, pairs: list[PairSample], pad_id: int, batch_size: int, device) -> dict:
    """Pairwise accuracy over every held-out pair, and per domain (`heldout_accuracy/<domain>`).
    Every rank scores all of them: the numbers are the same on each, no gather needed."""
    model.eval()
    chosen, rejected = [], []
    for start in range(0, len(pairs), batch_size):
        batch = (tensor.to(device) for tensor in collate_pairs(pairs[start:start + batch_size], pad_id))
        scores_chosen, scores_rejected = model(*batch).chunk(2)
        chosen.append(scores_chosen)
        rejected.append(scores_rejected)
    model.train()
    chosen, rejected = torch.cat(chosen).cpu(), torch.cat(rejected).cpu()
    by_domain = defaultdict(list)
    for index, pair in enumerate(pairs):
        by_domain[pair.domain].append(index)
    metrics = {"heldout_accuracy": pairwise_accuracy(chosen, rejected),
               "heldout_margin": (chosen - rejected).mean().item()}
    for domain, indices in sorted(by_domain.items()):
        metrics[f"heldout_accuracy/{domain}"] = pairwise_accuracy(chosen[indices], rejected[indices])
    return metrics


def main(argv: list[str] | None = None) -> None:
    stage_main(TrainOrmConfig, train, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
