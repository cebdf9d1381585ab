"""The module the SFT engine trains: a causal LM scored only where its tokens are trained."""

from __future__ import annotations

import torch

from stages.sft.loss import sft_loss, trained_positions


class SftObjective(torch.nn.Module):
    """Runs the LM head on the trained positions alone (about a third of a demo batch).

    The vocabulary projection and its softmax are the largest matmul of a small model; computing them
    for prompt and padding positions only to mask them out cost a fifth of an SFT step. Wrapping the
    model keeps DeepSpeed's forward hooks in play (the engine calls this module, not its parts).
    """

    def __init__(self, causal_lm: torch.nn.Module):
        super().__init__()
        self.causal_lm = causal_lm

    def forward(self, input_ids, attention_mask, loss_mask, output_attentions: bool = False):
        """(SFT loss, per-layer attention probabilities or None)."""
        trunk = self.causal_lm.model(
            input_ids=input_ids, attention_mask=attention_mask, output_attentions=output_attentions, use_cache=False
        )
        samples, positions = trained_positions(loss_mask)
        logits = self.causal_lm.lm_head(trunk.last_hidden_state[samples, positions])
        loss = sft_loss(logits, input_ids[samples, positions + 1], samples, input_ids.shape[0])
        return loss, trunk.attentions
