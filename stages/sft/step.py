"""One SFT optimizer step and the held-out loss: the detail behind the main loop's two calls."""

from __future__ import annotations

import torch

from model.dsa import indexer_kl_loss, recording_indexer_scores, set_dense_attention
from model.dsa_gather import SPARSE_GATHER
from stages.common.batches import Batch, TokenizedSample, collate
from stages.common.finite import FiniteSteps
from stages.common.micro_batches import micro_slices
from stages.common.mtp_training import MtpTraining
from stages.sft.objective import SftObjective


def _forward(objective, batch: Batch, with_hidden: bool):
    """`objective` is an SftObjective, or the DeepSpeed engine wrapping one."""
    with recording_indexer_scores(objective) as records:
        lm, attentions, hidden = objective(batch.input_ids, batch.attention_mask, batch.loss_mask,
                                           output_attentions=True, with_hidden=with_hidden)
    indexer = indexer_kl_loss(attentions, records, batch.attention_mask)
    return lm, indexer, hidden


# Before DSA is switched on the model trains alone: SDPA, indexer skipped. The warm-up's loss reads eager
# attention's probabilities over every key; the sparse phase's, sparse-gather attention's over the selected keys.
PHASE_ATTENTION = {"dense": "sdpa", "indexer_warmup": "eager", "sparse": SPARSE_GATHER}


def enter_phase(objective: SftObjective, phase: str) -> None:
    """Attention for a DSA phase (stages.sft.config.DsaSchedule)."""
    set_dense_attention(objective, dense=phase != "sparse", score_keys=phase != "dense")
    objective.causal_lm.set_attn_implementation(PHASE_ATTENTION[phase])


def train_step(engine, samples: list[TokenizedSample], pad_id: int, micro: int, phase: str, indexer_weight: float,
               finite: FiniteSteps, step: int, mtp: MtpTraining | None = None) -> dict[str, float]:
    """One optimizer step of `phase`, which `enter_phase` has set up, over this rank's `samples` in micro-
    batches of `micro`. Each micro-batch's LM loss weighs by its share of the samples with trained tokens,
    its indexer loss by its share of the queries, so the step's loss is the whole share's. In the sparse
    phase LM loss and indexer loss share one backward: the indexer reads detached inputs, so neither loss
    reaches the other's parameters. In the indexer warm-up only the indexer loss is optimized. Outside it, `mtp`
    (a model carrying a trained MTP layer) takes the MTP loss of the same tokens, weighed as the LM loss, and steps
    the layer after the model (stages/common/mtp_training.py). A non-finite loss skips the update (`finite`)."""
    engine.train()
    batches = [collate(samples[part], pad_id).to(engine.device) for part in micro_slices(len(samples), micro)]
    targets = max(sum(batch.samples_with_targets for batch in batches), 1)
    queries = sum(int(batch.attention_mask.sum()) for batch in batches)
    step_losses = {"lm": 0.0, "indexer": 0.0}
    with_mtp = mtp is not None and phase != "indexer_warmup"

    def micro_losses():
        for batch in batches:
            lm_share, query_share = batch.samples_with_targets / targets, int(batch.attention_mask.sum()) / queries
            if phase == "dense":  # DSA not switched on yet: no indexer, no attention probabilities
                lm, _, hidden = engine(batch.input_ids, batch.attention_mask, batch.loss_mask, with_hidden=with_mtp)
                indexer = torch.zeros((), device=lm.device)
            else:
                lm, indexer, hidden = _forward(engine, batch, with_mtp)
            step_losses["lm"] += lm.item() * lm_share
            step_losses["indexer"] += indexer.item() * query_share
            indexer_part = indexer_weight * indexer * query_share
            if phase == "indexer_warmup":
                yield indexer_part
                continue
            if with_mtp:  # from the trunk's detached hidden states, outside the engine: its backward is not ours
                mtp_loss = mtp.loss(engine.module.causal_lm, batch.input_ids, batch.attention_mask, batch.loss_mask,
                                    hidden)
                step_losses["mtp"] = step_losses.get("mtp", 0.0) + mtp_loss.item() * lm_share
                mtp.accumulate(mtp_loss * lm_share)
            yield lm * lm_share + indexer_part

    finite.step(engine, micro_losses(), step)
    if with_mtp:
        mtp.step(engine.get_lr()[0])
    return step_losses


@torch.no_grad()
def heldout_loss(objective, samples: list[TokenizedSample], pad_id: int, batch_size: int, device) -> float:
    objective.eval()
    total, count = 0.0, 0
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        batch = collate(chunk, pad_id).to(device)
        loss, _, _ = objective(batch.input_ids, batch.attention_mask, batch.loss_mask)
        total += loss.item() * len(chunk)
        count += len(chunk)
    objective.train()
    return total / max(1, count)
