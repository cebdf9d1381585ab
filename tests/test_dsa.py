"""The trainable, tie-stable DSA indexer (model/dsa.py) against transformers' stock indexer."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, GlmMoeDsaForCausalLM

from model import dsa
from model.dsa import (
    DsaIndexer,
    IndexerRecord,
    indexer_kl_loss,
    install_dsa_indexers,
    key_scores,
    recording_indexer_scores,
    set_dense_attention,
)
from model.mtp import main_layers
from model.presets import build_model, preset_config


def random_ids(tokenizer, batch, length, seed=0):
    return torch.randint(0, len(tokenizer), (batch, length), generator=torch.Generator().manual_seed(seed))


def indexer_params(model):
    return {name: p for name, p in model.named_parameters() if ".indexer." in name}


def eager_dsa_model(tokenizer, seed=0):
    """The preset without its MTP layer (tests/test_mtp.py): these tests read every parameter of the model's own."""
    model = build_model("glm5-tiny", tokenizer, seed=seed)
    model.model.layers = main_layers(model.model)
    model.config.num_nextn_predict_layers = 0
    model.set_attn_implementation("eager")  # attention probabilities are the indexer's target
    install_dsa_indexers(model)
    return model


def kv_cache_vs_full_forward_gap(model, prompt, new_tokens):
    """Largest logit gap between greedy decoding with a KV cache and one forward of the final sequence."""
    out = model.generate(
        prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
        output_logits=True, return_dict_in_generate=True,
    )
    decoded = torch.stack(out.logits, dim=1)
    refed = model(out.sequences).logits[:, prompt.shape[1] - 1 : -1]
    return (decoded - refed).abs().max().item()


@torch.no_grad()
def test_install_keeps_parameters_and_is_idempotent(tokenizer):
    model = build_model("glm5-tiny", tokenizer)
    before = indexer_params(model)
    indexers = install_dsa_indexers(model)
    assert len(indexers) == model.config.num_hidden_layers
    assert all(type(ix) is DsaIndexer for ix in indexers)
    assert indexer_params(model) == before  # the very same Parameter objects, under the same names
    assert install_dsa_indexers(model) == indexers


@torch.no_grad()
def test_short_sequence_logits_equal_stock(tokenizer):
    stock = build_model("glm5-tiny", tokenizer).eval()
    ours = copy.deepcopy(stock)
    install_dsa_indexers(ours)
    ids = random_ids(tokenizer, 2, stock.config.index_topk - 4)
    assert torch.equal(ours(ids).logits, stock(ids).logits)


@torch.no_grad()
def test_long_sequence_logits_equal_stock_without_ties(tokenizer, monkeypatch):
    # Scores tie only where every indexer head's ReLU is 0; with 16 heads that (nearly) never happens.
    config = preset_config("glm5-tiny", tokenizer)
    config.index_n_heads = 16
    torch.manual_seed(0)
    stock = GlmMoeDsaForCausalLM(config).eval()
    ours = copy.deepcopy(stock)
    install_dsa_indexers(ours)
    scored = []  # every key's scores, as the selection saw them
    monkeypatch.setattr(dsa, "key_scores", lambda *args: scored.append(key_scores(*args)) or scored[-1])
    ids = random_ids(tokenizer, 2, 3 * config.index_topk)
    logits = ours(ids).logits  # masked SDPA attention, as the stock model's
    k = config.index_topk
    assert len(scored) == config.num_hidden_layers
    for scores in scored:  # the case really is tie-free where a choice is made
        ranked = scores[:, k:].sort(dim=-1, descending=True).values
        assert (ranked[..., k - 1] > ranked[..., k]).all()
    assert torch.equal(logits, stock(ids).logits)


@torch.no_grad()
def test_kv_cache_decoding_selects_the_same_keys_as_a_full_forward(tokenizer):
    stock = build_model("glm5-tiny", tokenizer, seed=3).eval()
    for layer in stock.model.layers:  # head 0 scores exactly 0 everywhere: ties at every boundary
        indexer = layer.self_attn.indexer
        indexer.wq_b.weight[: indexer.head_dim].zero_()
    ours = copy.deepcopy(stock)
    install_dsa_indexers(ours)
    prompt = random_ids(tokenizer, 1, 70)  # 100 tokens in the end, far past index_topk
    assert stock.config.index_topk < 70
    assert kv_cache_vs_full_forward_gap(ours, prompt, 30) < 1e-5
    assert kv_cache_vs_full_forward_gap(stock, prompt, 30) > 1e-3


@pytest.mark.parametrize("checkpointing", [False, True])
def test_indexer_loss_trains_only_the_indexer_and_lm_loss_never_reaches_it(tokenizer, checkpointing):
    model = eager_dsa_model(tokenizer)
    if checkpointing:  # recomputes each layer, indexer included, during backward: after the recording ended
        model.train().activation_checkpointing_enable()
    set_dense_attention(model, True)
    ids = random_ids(tokenizer, 2, 50)
    with recording_indexer_scores(model) as records:
        out = model(ids, labels=ids, output_attentions=True, use_cache=False)
    assert len(records) == model.config.num_hidden_layers
    indexer_kl_loss(out.attentions, records).backward(retain_graph=True)
    for name, param in model.named_parameters():
        if ".indexer." in name:
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert param.grad is None, name

    model.zero_grad(set_to_none=True)
    out.loss.backward()
    assert all(p.grad is None for p in indexer_params(model).values())
    assert model.lm_head.weight.grad is not None


def test_warm_up_then_sparse_training_reduces_the_indexer_loss(tokenizer):
    model = eager_dsa_model(tokenizer, seed=1)
    with torch.no_grad():  # at init attention is nearly uniform and so is softmax(I): the loss starts near 0
        for layer in model.model.layers:
            layer.self_attn.q_b_proj.weight.mul_(30)
    ids = random_ids(tokenizer, 2, 64, seed=1)
    mask = torch.ones_like(ids)
    mask[1, :20] = 0  # left padding: pad queries may see no key at all and must not poison the loss
    optimizer = torch.optim.Adam(indexer_params(model).values(), lr=1e-2)

    def train(steps):
        losses = []
        for _ in range(steps):
            with recording_indexer_scores(model) as records:
                out = model(ids, attention_mask=mask, output_attentions=True)
            loss = indexer_kl_loss(out.attentions, records, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    set_dense_attention(model, True)
    dense = train(12)
    assert dense[-1] < 0.6 * dense[0]
    set_dense_attention(model, False)
    sparse = train(6)
    assert all(torch.isfinite(torch.tensor(sparse)))
    assert sparse[-1] < sparse[0]


def test_trained_indexer_survives_a_plain_transformers_round_trip(tokenizer, tmp_path):
    model = eager_dsa_model(tokenizer, seed=2)
    set_dense_attention(model, True)
    optimizer = torch.optim.Adam(indexer_params(model).values(), lr=1e-2)
    ids = random_ids(tokenizer, 2, 50)
    for _ in range(3):
        with recording_indexer_scores(model) as records:
            out = model(ids, output_attentions=True)
        optimizer.zero_grad()
        indexer_kl_loss(out.attentions, records).backward()
        optimizer.step()
    assert not torch.equal(model.model.layers[0].self_attn.indexer.wk.weight, build_model(
        "glm5-tiny", tokenizer, seed=2).model.layers[0].self_attn.indexer.wk.weight)

    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    assert type(loaded.model.layers[0].self_attn.indexer) is not DsaIndexer
    trained, reloaded = indexer_params(model), indexer_params(loaded)
    assert trained.keys() == reloaded.keys()
    assert all(torch.equal(trained[name], reloaded[name]) for name in trained)


@torch.no_grad()
def test_dense_attention_without_the_indexer_gives_the_same_output(tokenizer):
    model = build_model("glm5-tiny", tokenizer).eval()
    ids = random_ids(tokenizer, 2, 3 * model.config.index_topk)
    set_dense_attention(model, True)
    scored = model(ids).logits
    generated = model.generate(ids, max_new_tokens=8, do_sample=False)
    set_dense_attention(model, True, score_keys=False)
    assert torch.equal(model.generate(ids, max_new_tokens=8, do_sample=False), generated)  # with a KV cache
    model.set_attn_implementation("sdpa")
    assert torch.allclose(model(ids).logits, scored, atol=1e-5)


def test_dense_attention_equals_a_top_k_covering_every_key(tokenizer):
    dense = build_model("glm5-tiny", tokenizer).eval()
    wide = copy.deepcopy(dense)
    set_dense_attention(dense, True)
    ids = random_ids(tokenizer, 2, 3 * dense.config.index_topk)
    for indexer in install_dsa_indexers(wide):
        indexer.index_topk = ids.shape[1]
    assert torch.equal(dense(ids).logits, wide(ids).logits)
    set_dense_attention(dense, False)
    assert not torch.allclose(dense(ids).logits, wide(ids).logits)


def test_loss_needs_records_and_attention_probabilities(tokenizer):
    model = build_model("glm5-tiny", tokenizer)  # sdpa returns no attention probabilities
    ids = random_ids(tokenizer, 1, 10)
    with recording_indexer_scores(model) as records:
        out = model(ids, output_attentions=True)
        with pytest.raises(ValueError, match="no indexer records"):
            indexer_kl_loss(out.attentions, records)  # the records arrive when the block exits
    with pytest.raises(ValueError, match="eager attention"):
        indexer_kl_loss(out.attentions, records)


def test_indexer_loss_is_the_mean_kl_over_the_queries_that_are_not_padding():
    """Sparse records by hand: the second sequence's first query is padding and sees no key (its scores all
    -inf); the loss is KL(p ‖ softmax(I)) averaged over the other queries, each renormalised over its keys."""
    generator = torch.Generator().manual_seed(0)
    attention = torch.rand(2, 3, 4, 5, generator=generator)  # [B, H, S, k] probabilities over the selected keys
    attention[1, :, 0, 2:] = 0.0  # a target without mass on some keys
    scores = torch.randn(2, 4, 5, generator=generator)
    scores[0, 1, 4] = float("-inf")  # a selected key the query may not see ...
    attention[0, :, 1, 4] = 0.0  # ... has no attention either
    scores[1, 0] = float("-inf")
    mask = torch.ones(2, 4, dtype=torch.long)
    mask[1, 0] = 0
    record = IndexerRecord(0, scores, torch.zeros(2, 4, 5, dtype=torch.long), sparse=True)
    expected = []
    for b, s in mask.nonzero().tolist():
        p = attention[b, :, s].sum(0) / attention[b, :, s].sum()
        log_q = torch.log_softmax(scores[b, s], dim=-1)
        expected.append(sum(p[j] * (p[j].log() - log_q[j]) for j in range(5) if p[j] > 0))
    loss = indexer_kl_loss([attention], [record], mask)
    assert loss.item() == pytest.approx(torch.stack(expected).mean().item(), rel=1e-6)
