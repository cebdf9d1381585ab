"""The SFT objective: the masked loss (SPEC.md), and the module the SFT engine trains with it, a causal
LM scored only where its tokens are trained. The loss is checked against hand-computed values in tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.padding_free import padding_free_feed_forward


def trained_positions(loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sample, position) of every position whose next token is trained: token t is predicted at t-1."""
    samples, positions = loss_mask[:, 1:].nonzero(as_tuple=True)
    return samples, positions


def sft_loss(logits: torch.Tensor, targets: torch.Tensor, samples: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Mean over samples of the masked token-mean NLL (SPEC.md): long and short samples weigh the same.

    Takes the trained positions only (`trained_positions`): their logits [N, V], the tokens they
    predict [N] and the sample each belongs to [N]. A sample with no trained token is left out.
    """
    nll = -F.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    totals = nll.new_zeros(batch_size).index_add(0, samples, nll)
    counts = torch.bincount(samples, minlength=batch_size).to(nll.dtype)
    has_tokens = counts > 0
    return (totals[has_tokens] / counts[has_tokens]).mean() if has_tokens.any() else logits.sum() * 0.0


class SftObjective(torch.nn.Module):
    """Runs the LM head on the trained positions alone (about a third of a demo batch), and each layer's
    feed-forward on the batch's tokens alone (model/padding_free.py).

    The vocabulary projection and its softmax are the largest matmul of a small model; computing them
    for prompt and padding positions only to mask them out cost a fifth of an SFT step. The feed-forward's
    share of padding cost another eighth. Wrapping the model keeps DeepSpeed's forward hooks in play (the
    engine calls this module, not its parts).

    On request (`with_hidden`) it also returns the trunk's last hidden states, detached: stages/sft/step.py computes
    the MTP layer's loss from them outside the engine's forward, since DeepSpeed takes every tensor the engine returns
    as a loss its own backward must run (and the MTP layer trains apart from the model, model/mtp.py).
    """

    def __init__(self, causal_lm: torch.nn.Module):
        super().__init__()
        self.causal_lm = causal_lm
        padding_free_feed_forward(causal_lm)

    def forward(self, input_ids, attention_mask, loss_mask, output_attentions: bool = False, with_hidden: bool = False):
        """(SFT loss, per-layer attention probabilities or None, the detached last hidden states or None)."""
        trunk = self.causal_lm.model(
            input_ids=input_ids, attention_mask=attention_mask, output_attentions=output_attentions, use_cache=False
        )
        samples, positions = trained_positions(loss_mask)
        logits = self.causal_lm.lm_head(trunk.last_hidden_state[samples, positions])
        loss = sft_loss(logits, input_ids[samples, positions + 1], samples, input_ids.shape[0])
        hidden = trunk.last_hidden_state.detach() if with_hidden else None
        return loss, trunk.attentions, hidden
