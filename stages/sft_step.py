"""One SFT optimizer step and the held-out loss: the detail behind the main loop's two calls."""

from __future__ import annotations

import torch

from model.dsa import indexer_kl_loss, recording_indexer_scores
from stages.batches import Batch, TokenizedSample, collate
from stages.losses import sft_loss


def _forward(model, batch: Batch, restrict_to_selected: bool):
    with recording_indexer_scores(model) as records:
        output = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_attentions=True)
    lm = sft_loss(output.logits, batch.input_ids, batch.loss_mask)
    indexer = indexer_kl_loss(output.attentions, records, batch.attention_mask, restrict_to_selected)
    return lm, indexer


def train_step(engine, batch: Batch, phase: str, indexer_weight: float) -> dict[str, float]:
    """LM loss and indexer loss in one backward: the indexer reads detached inputs, so neither loss
    reaches the other's parameters. In the indexer warm-up only the indexer loss is optimized."""
    engine.train()
    lm, indexer = _forward(engine, batch, restrict_to_selected=phase == "sparse")
    total = indexer_weight * indexer if phase == "indexer_warmup" else lm + indexer_weight * indexer
    engine.backward(total)
    engine.step()
    return {"lm": lm.item(), "indexer": indexer.item()}


@torch.no_grad()
def heldout_loss(model, samples: list[TokenizedSample], pad_id: int, batch_size: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        batch = collate(chunk, pad_id)
        output = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        total += sft_loss(output.logits, batch.input_ids, batch.loss_mask).item() * len(chunk)
        count += len(chunk)
    model.train()
    return total / max(1, count)
