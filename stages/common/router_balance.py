"""The stage side of MoE load balancing (model/moe_balance.py): after each optimizer step the step's expert
loads summed over ranks, the routers' biases moved where the stage balances (before the step's weights are
pushed or saved, so engines and checkpoints carry the new biases), and the loads for the step record; the
last step's record holds the tokens each expert of each layer got over the job, for the report's heat map."""

from __future__ import annotations

from model.moe_balance import RouterLoad, load_figures
from stages.common.config import RouterBalancing
from stages.common.distributed import all_sum


class RouterBalance:
    def __init__(self, model, settings: RouterBalancing):
        """`model`: the causal LM being trained, before DeepSpeed wraps it (its routers are hooked)."""
        self.load, self.settings = RouterLoad(model), settings
        self.total = self.load.take()  # zeros: [layers, experts]

    def after_step(self, last: bool) -> dict:
        """Every rank calls it after every step, a step without an update too (the counts are summed over
        ranks): the step record's expert-load figures, empty where nothing was routed; on the `last` step,
        with the job's tokens per layer and expert."""
        counts = all_sum(self.load.take())
        self.total += counts
        if self.settings.enabled:
            self.load.balance(counts, self.settings.rate)
        figures = load_figures(counts)
        return figures | {"expert_tokens": self.total.long().tolist()} if last and self.total.sum() else figures
