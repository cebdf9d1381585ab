"""Padding-free feed-forward (model/padding_free.py): the SFT objective's loss and every gradient are the padded
computation's, sparse and dense, with activation checkpointing too; the routers count the same tokens; routing
replay, which reads the padded layout, refuses it."""

import copy

import pytest
import torch

from model.dsa import set_dense_attention
from model.logprobs import scored_logprobs
from model.moe_balance import RouterLoad
from model.padding_free import padding_free_feed_forward
from model.presets import build_model
from model.routing import ReplayedRouting, RoutingLayout
from model.shared_prompts import shared_prompt_logprobs
from stages.common.batches import TokenizedSample, collate
from stages.sft.objective import SftObjective, sft_loss, trained_positions
from tests.test_shared_prompts import groups


def padded_batch(tokenizer, lengths=(70, 9, 52, 31)):
    generator = torch.Generator().manual_seed(0)
    samples = []
    for length in lengths:
        ids = torch.randint(3, len(tokenizer), (length,), generator=generator).tolist()
        samples.append(TokenizedSample(ids, [0] * (length // 3) + [1] * (length - length // 3)))
    return collate(samples, tokenizer.pad_token_id)


def padded_loss(causal_lm, batch):
    """SftObjective's loss computed over the padded layout: the same model without the hooks."""
    trunk = causal_lm.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    samples, positions = trained_positions(batch.loss_mask)
    logits = causal_lm.lm_head(trunk.last_hidden_state[samples, positions])
    return sft_loss(logits, batch.input_ids[samples, positions + 1], samples, batch.input_ids.shape[0])


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention", ["sparse", "dense"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_loss_and_every_gradient_are_the_padded_computation_s(tokenizer, attention, checkpointing):
    batch = padded_batch(tokenizer)
    assert batch.attention_mask.float().mean() < 0.7  # a third of the positions are padding
    reference = build_model("glm5-tiny", tokenizer, seed=3)
    set_dense_attention(reference, dense=attention == "dense", score_keys=False)
    model = copy.deepcopy(reference)
    objective = SftObjective(model)
    for each in (reference, model):
        each.train()
        if checkpointing:
            each.activation_checkpointing_enable({"use_reentrant": False})
    expected = padded_loss(reference, batch)
    expected.backward()
    loss, _, _ = objective(batch.input_ids, batch.attention_mask, batch.loss_mask)
    loss.backward()
    assert torch.allclose(loss, expected, atol=1e-6)
    want, got = gradients(reference), gradients(model)
    assert want.keys() == got.keys() and any(".mlp." in name for name in got)
    for name, grad in want.items():
        assert torch.allclose(got[name], grad, atol=1e-5, rtol=1e-4), name  # float rounding: sums in another order


def test_the_routers_count_the_batch_s_tokens_alone_and_see_no_padding(tokenizer):
    batch = padded_batch(tokenizer)
    model = build_model("glm5-tiny", tokenizer, seed=3)
    load = RouterLoad(model)
    seen = []
    for router in load.routers:
        router.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].shape[0]))
    objective = SftObjective(model)
    padding_free_feed_forward(model)  # installed once: a second call adds no hooks
    objective(batch.input_ids, batch.attention_mask, batch.loss_mask)[0].backward()
    tokens = int(batch.attention_mask.sum())
    assert seen == [tokens] * len(load.routers)
    top_k = model.config.num_experts_per_tok
    assert load.take().sum(dim=1).tolist() == [float(tokens * top_k)] * len(load.routers)


@pytest.mark.parametrize("share_prompts", [False, True])
def test_rl_logprobs_gradients_and_routing_replay_are_the_padded_computation_s(tokenizer, share_prompts):
    """The RL forward (model/logprobs.py), and each distinct prompt once then the responses after its KV cache
    (model/shared_prompts.py), whose mask has the cached keys' columns too; the engine's experts replayed at the
    tokens' positions."""
    batch = groups(len(tokenizer), seed=4)
    reference = build_model("glm5-tiny", tokenizer, seed=3).eval()
    set_dense_attention(reference, dense=False)
    model = copy.deepcopy(reference)
    padding_free_feed_forward(model)
    layout = RoutingLayout.of(model)
    generator = torch.Generator().manual_seed(0)
    experts = torch.stack([torch.randperm(model.config.n_routed_experts, generator=generator)[:layout.top_k]
                           for _ in range(batch.input_ids.numel() * len(layout.moe_layers))])
    experts = experts.view(*batch.input_ids.shape, len(layout.moe_layers), layout.top_k).to(torch.int32)
    experts[~batch.attention_mask.bool()] = -1
    for row, length in enumerate(batch.prompt_lengths.tolist()):  # a group's prompt routed alike for each member
        first = next(r for r in range(row + 1) if torch.equal(batch.input_ids[r, :length], batch.input_ids[row, :length]))
        experts[row, :length] = experts[first, :length]
    results = []
    for each in (reference, model):
        replayed, load = ReplayedRouting(each), RouterLoad(each)
        with replayed.replaying(experts, True):
            if share_prompts:
                logp = shared_prompt_logprobs(each, batch.input_ids, batch.attention_mask, batch.response_mask,
                                              batch.prompt_lengths, routed_experts=experts,
                                              before_pass=lambda pass_layout, r=replayed: r.given(pass_layout(experts, -1)))
            else:
                logp = scored_logprobs(each, batch.input_ids, batch.attention_mask, batch.response_mask)
            logp.sum().backward()
        results.append((logp.detach(), gradients(each), replayed.agreement(), load.take()))
    (want, want_grads, want_agreement, want_load), (got, got_grads, got_agreement, got_load) = results
    assert torch.allclose(got, want, atol=1e-5)
    assert got_agreement == want_agreement and torch.equal(got_load, want_load)
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5, rtol=1e-4), name  # float rounding: sums in another order
