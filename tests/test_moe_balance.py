"""MoE load balancing by the routers' biases (model/moe_balance.py): the tokens each expert got are counted in
training forwards only (padding, no-grad forwards and recomputation left out), and the update moves each bias
toward its layer's mean load by γ, adding up in fp32 whatever the buffer's dtype."""

import pytest
import torch
from pydantic import ValidationError

from infra.store import open_store
from model.moe_balance import BIAS, RouterLoad, load_figures, routers
from model.mtp import main_layers
from model.presets import build_model
from stages.common.config import ComputeSettings
from stages.common.training_engine import AUTO_EXPERTS_KERNEL, adapt_model
from tests.sft_fixtures import router_biases, run_sft, small_config


def test_the_load_counts_routed_tokens_of_training_forwards_only(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    load = RouterLoad(model)
    layers, top_k = len(load.routers), model.config.num_experts_per_tok
    assert layers == sum(1 for layer in main_layers(model.model) if hasattr(layer.mlp, "gate")) > 0
    ids = torch.randint(3, 100, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0  # 5 padding positions
    model(input_ids=ids, attention_mask=mask)
    counts = load.take()
    assert counts.shape == (layers, model.config.num_local_experts)
    assert counts.sum(dim=1).tolist() == [float((3 * 12 - 5) * top_k)] * layers
    assert load.take().sum() == 0  # taken
    with torch.no_grad():  # a held-out loss, a reference model's logprobs
        model(input_ids=ids, attention_mask=mask)
    assert load.take().sum() == 0
    model.activation_checkpointing_enable()
    model.train()
    model(input_ids=ids, attention_mask=mask).logits.sum().backward()  # the layers run again inside backward
    assert load.take().sum(dim=1).tolist() == [float((3 * 12 - 5) * top_k)] * layers


def test_each_bias_steps_toward_its_layer_s_mean_load_and_the_figures_show_the_spread(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    load = RouterLoad(model)
    counts = torch.tensor([[10.0, 30.0, 20.0, 20.0]] * len(load.routers))
    load.balance(counts, rate=0.01)
    for router in load.routers:  # under the mean up, over it down, at it unchanged
        assert getattr(router, BIAS).tolist() == pytest.approx([0.01, -0.01, 0.0, 0.0])
    figures = load_figures(counts)
    assert figures["expert_load_max_over_mean"] == 1.5
    assert figures["expert_load"]["min_over_mean"] == [0.5] * len(load.routers)
    assert figures["expert_load"]["idle_experts"] == [0] * len(load.routers)
    assert load_figures(torch.zeros(2, 4)) == {}  # nothing routed: nothing to show


def test_small_steps_add_up_on_a_bf16_bias(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    for router in routers(model):
        setattr(router, BIAS, torch.full((4,), 0.5, dtype=torch.bfloat16))
    load = RouterLoad(model)
    for _ in range(20):  # 0.5 + 0.001 rounds back to 0.5 in bf16 each time; twenty of them are 0.52
        load.balance(torch.tensor([[10.0, 30.0, 20.0, 20.0]] * len(load.routers)), rate=1e-3)
    bias = getattr(load.routers[0], BIAS)
    assert bias.dtype == torch.bfloat16 and float(bias[0]) == float(torch.tensor(0.52, dtype=torch.bfloat16))


@pytest.mark.slow
def test_sft_balances_its_routers_and_keeps_the_load_on_record(small_store, tmp_path):
    config = small_config(small_store, "balanced", router_balancing={"rate": 0.01})
    steps = [event for event in run_sft(config, tmp_path) if event["event"] == "step"]
    layers = len(steps[0]["expert_load"]["max_over_mean"])
    assert layers > 0 and all(len(step["expert_load"]["idle_experts"]) == layers for step in steps)
    assert all(step["expert_load_max_over_mean"] >= 1.0 for step in steps)
    # The job's tokens per layer and expert, for the report's heat map, on the last step's record alone.
    assert [("expert_tokens" in step) for step in steps] == [False] * (len(steps) - 1) + [True]
    assert len(steps[-1]["expert_tokens"]) == layers
    store = open_store(small_store["root"])
    balanced = router_biases(store, config.output_name, tmp_path)
    # Each bias moved by 0.01 a step, up or down or not at all: a whole number of steps, at most one per step.
    for bias in balanced:
        moved = bias / 0.01
        assert torch.allclose(moved, moved.round(), atol=1e-3) and moved.abs().max() <= len(steps)
    assert any(bias.abs().sum() > 0 for bias in balanced)

    off = small_config(small_store, "unbalanced", router_balancing={"enabled": False})
    off_steps = [event for event in run_sft(off, tmp_path) if event["event"] == "step"]
    assert all("expert_load" in step for step in off_steps)  # measured either way
    assert all(bias.abs().sum() == 0 for bias in router_biases(store, off.output_name, tmp_path))


def test_the_experts_kernel_is_the_one_compute_names_and_each_computes_the_same(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    ids = torch.randint(3, 100, (2, 16))
    losses = {}
    for kernel in ("eager", "batched_mm", "grouped_mm"):
        adapt_model(model, ComputeSettings(experts_kernel=kernel))
        assert model.config._experts_implementation == kernel
        losses[kernel] = model(input_ids=ids, labels=ids).loss.item()
    assert max(losses.values()) - min(losses.values()) < 1e-5
    adapt_model(model, ComputeSettings())  # auto: what bench/moe_experts.py measured fastest here
    assert model.config._experts_implementation == AUTO_EXPERTS_KERNEL["cpu"]
    with pytest.raises(ValidationError, match="experts_kernel"):
        ComputeSettings(experts_kernel="fused")
