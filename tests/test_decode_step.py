"""The engine's own decoding step (rollout/engine/decode_step.py) against transformers' forward of the same model:
the same logits, the same cache, the same routed experts, step after step from a left-padded prefill, before and
past the DSA top-k, on the preset and on a model that takes its other paths (a "shared" indexer layer, biases,
group-limited routing over more experts than the every-expert rule covers); and over several tokens per row at
once, as a speculative verification feeds them."""

import copy

import pytest
import torch

from model.dsa import set_dense_attention
from model.presets import build_model
from model.routing import RoutingCapture
from rollout.engine.decode_step import EVERY_EXPERT_UP_TO, DecodeStep, covers
from rollout.engine.generation import Engine, left_padded

VARIANTS = {
    "preset": {},
    "other paths": dict(indexer_types=["full", "shared", "full"], attention_bias=True, n_routed_experts=8, n_group=2,
                        topk_group=1),
}


def served(tokenizer, variant: str):
    model = build_model("glm5-tiny", tokenizer, seed=3)
    if VARIANTS[variant]:
        config = model.config.to_dict() | VARIANTS[variant]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            model = type(model)(type(model.config).from_dict(config))
            for name, parameter in model.named_parameters():  # biases and router weights away from their zero init
                if "bias" in name or "gate.weight" in name:
                    parameter.data.normal_(0, 0.5)
    set_dense_attention(model, False)
    return model.eval()


@pytest.mark.parametrize("variant", list(VARIANTS))
@torch.inference_mode()
def test_each_decoding_step_is_the_models_forward(tokenizer, variant):
    model = served(tokenizer, variant)
    assert covers(model)
    if variant == "other paths":
        assert model.config.n_routed_experts > EVERY_EXPERT_UP_TO * model.config.num_experts_per_tok
    routing, step = RoutingCapture(model), DecodeStep(model)
    routing.recording = True
    generator = torch.Generator().manual_seed(0)
    topk = model.config.index_topk
    prompts = [torch.randint(10, 1000, (length,), generator=generator).tolist() for length in (topk - 20, topk - 8, 9)]
    ids, mask = left_padded(prompts, model.config.pad_token_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    theirs, ours = out.past_key_values, copy.deepcopy(out.past_key_values)
    visible, positions = mask.bool()[:, None, None, :], positions[:, -1:]
    tokens = out.logits[:, -1].argmax(-1)
    for _ in range(30):  # the longest row passes the top-k after a few steps
        visible = torch.cat([visible, torch.ones_like(visible[..., :1])], dim=-1)
        positions = positions + 1
        expected = model(input_ids=tokens[:, None], attention_mask=visible, position_ids=positions, cache=theirs,
                         use_cache=True).logits[:, -1]
        routed = routing.last()
        got = next_token_logits(model, step, tokens, positions, ours, visible)
        assert (got - expected).abs().max() < 1e-4
        assert all(torch.equal(a, b) for a, b in zip(routing.last(), routed, strict=True))
        tokens = expected.argmax(-1)
    assert visible.shape[-1] > topk + 10
    for mine, stock in zip(ours.layers, theirs.layers, strict=True):
        for a, b in ((mine.keys, stock.keys), (mine.values, stock.values), (mine.indexer_keys, stock.indexer_keys)):
            assert (a is None and b is None) or (a.shape == b.shape and (a - b).abs().max() < 1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
@torch.inference_mode()
def test_several_tokens_per_row_are_the_models_forward_over_them(tokenizer, variant):
    """A speculative verification's forward: 4 tokens per row at once, each seeing its row's visible keys and the
    tokens before it, earlier columns hidden where drafts did not stand; before and past the top-k."""
    model = served(tokenizer, variant)
    routing, step = RoutingCapture(model), DecodeStep(model)
    routing.recording = True
    generator = torch.Generator().manual_seed(1)
    topk, fed = model.config.index_topk, 4
    prompts = [torch.randint(10, 1000, (length,), generator=generator).tolist() for length in (topk - 6, 30, 7)]
    ids, mask = left_padded(prompts, model.config.pad_token_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    theirs, ours = out.past_key_values, copy.deepcopy(out.past_key_values)
    visible, next_position = mask.bool(), positions[:, -1] + 1
    causal = torch.ones(fed, fed, dtype=torch.bool).tril()
    for _ in range(6):
        tokens = torch.randint(10, 1000, (len(prompts), fed), generator=generator)
        fed_positions = next_position[:, None] + torch.arange(fed)
        allowed = torch.cat([visible[:, None].expand(-1, fed, -1), causal.expand(len(prompts), -1, -1)], dim=2)
        expected = model.get_decoder()(input_ids=tokens, attention_mask=allowed[:, None], position_ids=fed_positions,
                                       cache=theirs, use_cache=True).last_hidden_state
        routed = routing.last()
        got = step.forward(tokens, fed_positions, ours, ~allowed)
        assert (got - expected).abs().max() < 1e-4
        assert all(torch.equal(a, b) for a, b in zip(routing.last(), routed, strict=True))
        stood = torch.randint(0, fed, (len(prompts),), generator=generator)  # the columns after it stay hidden
        visible = torch.cat([visible, torch.arange(fed)[None] <= stood[:, None]], dim=1)
        next_position = next_position + stood + 1
    assert visible.shape[-1] > topk + 10
    for mine, stock in zip(ours.layers, theirs.layers, strict=True):
        for a, b in ((mine.keys, stock.keys), (mine.values, stock.values), (mine.indexer_keys, stock.indexer_keys)):
            assert (a is None and b is None) or (a.shape == b.shape and (a - b).abs().max() < 1e-5)


@torch.inference_mode()
def test_refresh_folds_the_weights_the_model_holds_now(tokenizer):
    model = served(tokenizer, "preset")
    step = DecodeStep(model)
    ids = torch.randint(10, 1000, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)

    def next_logits():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        visible = torch.ones(2, 1, 1, 13, dtype=torch.bool)
        return next_token_logits(model, step, ids[:, -1], torch.full((2, 1), 12), out.past_key_values, visible), \
            model(input_ids=torch.cat([ids, ids[:, -1:]], dim=1)).logits[:, -1]

    before, _ = next_logits()
    for parameter in model.parameters():
        parameter.mul_(1.1)
    stale, expected = next_logits()
    step.refresh()
    fresh, _ = next_logits()
    assert (stale - expected).abs().max() > 1e-3 and (fresh - expected).abs().max() < 1e-4
    assert not torch.equal(before, fresh)


def test_a_push_that_fails_part_way_leaves_decoding_on_what_the_model_holds(tokenizer, tmp_path):
    build_model("glm5-tiny", tokenizer, seed=3).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    engine = Engine(tmp_path)

    def broken_push(served):
        served["model.layers.0.self_attn.q_b_proj.weight"].mul_(1.5)  # one tensor arrived, then the broadcast broke
        raise RuntimeError("the broadcast broke")

    with pytest.raises(RuntimeError, match="broke"):
        engine.update_weights_in_place(broken_push)
    assert torch.equal(engine.decode_step.layers[0].from_q_resid, DecodeStep(engine.model).layers[0].from_q_resid)


def next_token_logits(model, step: DecodeStep, tokens, positions, cache, visible):
    """The engine's plain decoding step: one token per row [B], positions [B, 1], the [B, 1, 1, T] visible mask."""
    return model.lm_head(step.forward(tokens[:, None], positions, cache, ~visible[:, 0]))[:, -1]
