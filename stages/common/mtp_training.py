"""The MTP layer's own training in a stage's steps (model/mtp.py), or its freezing, as the stage's `mtp` settings say.

The layer trains beside the model, not with it: its loss reads the model's hidden states detached, its gradients are
taken with `torch.autograd.grad` into buffers of its own (never the parameters' `.grad`, which DeepSpeed reduces,
clips and steps), and after the model's optimizer step its own AdamW steps it (gradients averaged over ranks,
clipped at the stage's `grad_clip` on their own, at the stage's current learning rate, on fp32 copies of its
weights). DeepSpeed's optimizer never holds it, and the one gradient-norm clip over the model's weights never sees
it: the model trains as it would without an MTP layer.

SFT computes the loss from the hidden states its forward already has. An RL step's forward returns logprobs only
(and computes shared prompts once): its MTP loss runs the model's trunk again without gradient.

Its optimizer state is not in the resume state: a resumed stage starts the layer's Adam moments afresh (the layer's
weights are in the checkpoint)."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatch

import torch
import torch.distributed as dist

from data_contracts.lineage import MtpRecord
from model.mtp import decoder_of, mtp_layer, mtp_loss
from stages.common.config import MtpSettings, OptimizerSettings


class MtpTraining:
    """`loss(…)` a batch's MTP loss, `accumulate(part)` its share's gradients, `step(lr)` after the model's step."""

    def __init__(self, layer: torch.nn.Module, settings: MtpSettings, optimizer: OptimizerSettings,
                 frozen: set[int] = frozenset()):
        self.settings, self.grad_clip = settings, optimizer.grad_clip
        # The whole layer but its DSA indexer, which no MTP loss reaches (its attention is dense here, model/mtp.py),
        # and the weights the stage freezes by name (`frozen`: their ids).
        self.parameters = [p for name, p in layer.named_parameters()
                           if ".indexer." not in f".{name}" and id(p) not in frozen]
        layer.requires_grad_(False)
        for parameter in self.parameters:
            parameter.requires_grad_(True)
        self._optimizer_settings = optimizer
        self.masters: list[torch.Tensor] | None = None  # made at the first step: after a resume has loaded weights
        self.optimizer: torch.optim.Optimizer | None = None
        self._grads: list[torch.Tensor | None] = [None] * len(self.parameters)

    def loss(self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             loss_mask: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """The MTP loss of the batch's trained tokens (`loss_mask` [B, T]), unweighted."""
        if hidden is None:
            with torch.no_grad():
                hidden = decoder_of(model)(input_ids=input_ids, attention_mask=attention_mask,
                                           use_cache=False).last_hidden_state
        return mtp_loss(model, hidden, input_ids, attention_mask, loss_mask, self.settings.depths)

    def accumulate(self, part: torch.Tensor) -> None:
        """The gradients of `part` (a micro-batch's MTP loss times its share of the step), added to the step's."""
        grads = torch.autograd.grad(self.settings.loss_weight * part, self.parameters, allow_unused=True)
        self._grads = [g if mine is None else (mine if g is None else mine + g) for mine, g in zip(self._grads, grads,
                                                                                                   strict=True)]

    def step(self, lr: float) -> float | None:
        """One update from the gradients accumulated since the last (averaged over ranks, clipped); their norm
        before clipping, or None where none were (a step that skipped the layer). A non-finite norm skips it."""
        grads, self._grads = self._grads, [None] * len(self.parameters)
        if all(g is None for g in grads):
            return None
        if self.masters is None:
            self._make_optimizer()
        for master, grad in zip(self.masters, grads, strict=True):
            master.grad = torch.zeros_like(master) if grad is None else grad.float()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for master in self.masters:
                dist.all_reduce(master.grad)
                master.grad /= dist.get_world_size()
        norm = float(torch.nn.utils.clip_grad_norm_(self.masters, self.grad_clip))
        if torch.isfinite(torch.tensor(norm)):
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            with torch.no_grad():
                for parameter, master in zip(self.parameters, self.masters, strict=True):
                    parameter.copy_(master)
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _make_optimizer(self) -> None:
        # Adam steps fp32 copies, as DeepSpeed's bf16 optimizer does: a bf16 weight would drop most small updates.
        settings = self._optimizer_settings
        self.masters = [p.detach().float().clone() for p in self.parameters]
        self.optimizer = torch.optim.AdamW(self.masters, lr=settings.lr, weight_decay=settings.weight_decay,
                                           betas=(0.9, 0.95))


def mtp_training(model: torch.nn.Module, settings: MtpSettings, optimizer: OptimizerSettings,
                 frozen: Sequence[str] = ()) -> MtpTraining | None:
    """After the engine is built (whose optimizer leaves the layer out: `trained_apart`, and whose LoRA, where asked,
    froze every other weight): the stage's MTP training for `model`, or None where it carries no MTP layer or the
    layer stays frozen (its parameters then take no gradient and are saved as loaded). `frozen`: the stage's globs
    of parameter names to keep as loaded, the MTP layer's included.

    ZeRO-3 partitions every weight of the model, the MTP layer's too, and gathers them only inside the model's
    forward, which the layer is not part of: there it stays frozen by default, and `mtp.train: true` is refused."""
    layer = mtp_layer(model)
    if layer is None:
        return None
    if optimizer.zero_stage == 3 and settings.train:
        raise ValueError("mtp.train: the MTP layer trains beside DeepSpeed's optimizer, which ZeRO-3 would partition "
                         "it under; use optimizer.zero_stage 0-2, or mtp.train: false to keep it frozen")
    if settings.train is False or optimizer.zero_stage == 3:
        layer.requires_grad_(False)
        return None
    kept = {id(p) for name, p in model.named_parameters() if any(fnmatch(name, pattern) for pattern in frozen)}
    return MtpTraining(layer, settings, optimizer, kept)


def trained_apart(model: torch.nn.Module) -> set[int]:
    """The ids of the parameters the engine's optimizer must leave out: the MTP layer's, which train on their own."""
    layer = mtp_layer(model)
    return set() if layer is None else {id(p) for p in layer.parameters()}


def mtp_record(model: torch.nn.Module, settings: MtpSettings | None) -> MtpRecord | None:
    """What a checkpoint's lineage says of its MTP layers."""
    layer = mtp_layer(model)
    if layer is None:
        return None
    trained = settings is not None and settings.train is not False and any(p.requires_grad for p in layer.parameters())
    return MtpRecord(layers=1, trained=trained, depths=settings.depths if trained else None)


def rl_loss_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """An RL batch's `response_mask` [N, L-1] (position t scores token t+1) as the tokens trained [N, L]."""
    return torch.cat([response_mask.new_zeros(response_mask.shape[0], 1), response_mask], dim=1)
