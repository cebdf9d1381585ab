"""Sparse-gather attention (model/dsa_gather.py) against transformers' masked path on the same weights."""

import copy

import pytest
import torch

from model import dsa, dsa_gather
from model.dsa import indexer_kl_loss, recording_indexer_scores, set_dense_attention, stable_topk
from model.dsa_gather import SPARSE_GATHER
from model.logprobs import next_token_logprobs
from model.presets import build_model


def random_ids(tokenizer, batch, length, seed=0):
    return torch.randint(0, len(tokenizer), (batch, length), generator=torch.Generator().manual_seed(seed))


def sparse_pair(tokenizer, seed=0):
    """The same sparse model twice: sparse-gather attention, and transformers' mask over SDPA attention."""
    gather = build_model("glm5-tiny", tokenizer, seed=seed)
    set_dense_attention(gather, False)
    masked = copy.deepcopy(gather)
    masked.set_attn_implementation("sdpa")
    return gather, masked


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few queries, so a test-sized sequence crosses many chunk boundaries."""
    monkeypatch.setattr(dsa, "SELECTION_CHUNK_ELEMENTS", 2 * 1024)
    monkeypatch.setattr(dsa_gather, "GATHER_CHUNK_ELEMENTS", 16 * 1024)


@pytest.fixture(params=["masked", "gather"])
def attention_path(request, monkeypatch):
    """Past the top-k, short sequences take the masked path; "gather" makes every one of them gather."""
    if request.param == "gather":
        monkeypatch.setattr(dsa_gather, "MASKED_KEYS_PER_TOPK", 0)
    return request.param


def logprobs(model, ids, mask):
    return next_token_logprobs(model(ids, attention_mask=mask).logits, ids)


@pytest.mark.parametrize("sorted_up_to", [0, dsa.SORTED_SELECTION_ELEMENTS])
def test_stable_topk_prefers_recent_keys_and_never_masked_ones(monkeypatch, sorted_up_to):
    monkeypatch.setattr(dsa, "SORTED_SELECTION_ELEMENTS", sorted_up_to)
    inf = float("inf")
    scores = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0, -inf, -inf]])
    assert stable_topk(scores, 3).tolist() == [[2, 3, 4]]
    assert stable_topk(scores[:, :5], 3).tolist() == [[2, 3, 4]]  # as if the masked keys were not there yet
    assert stable_topk(scores, 6).tolist() == [[0, 1, 2, 3, 4, 6]]


@pytest.mark.parametrize("sorted_up_to", [0, dsa.SORTED_SELECTION_ELEMENTS])  # topk and its repair; one sort
def test_stable_topk_picks_the_set_a_stable_sort_by_score_then_recency_picks(monkeypatch, sorted_up_to):
    monkeypatch.setattr(dsa, "SORTED_SELECTION_ELEMENTS", sorted_up_to)
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (64, 40), generator=generator).float()  # many exact ties
    scores[:, 30:] = float("-inf")
    for k in (1, 5, 30, 35):
        newest_first = torch.sort(scores.flip(-1), dim=-1, descending=True, stable=True).indices[..., :k]
        expected = (scores.shape[-1] - 1 - newest_first).sort(dim=-1).values
        assert torch.equal(stable_topk(scores, k), expected)


@pytest.mark.parametrize("chunked", [False, True])
def test_gather_logprobs_equal_the_masked_path(tokenizer, request, chunked, attention_path):
    if chunked:
        request.getfixturevalue("small_chunks")
    gather, masked = sparse_pair(tokenizer)
    ids = random_ids(tokenizer, 2, 4 * gather.config.index_topk)
    mask = torch.ones_like(ids)
    mask[1, :25] = 0  # left padding, as batched generation pads
    with torch.no_grad():
        expected = logprobs(masked, ids, mask)
        got = logprobs(gather, ids, mask)
    valid = (mask[:, :-1] * mask[:, 1:]).bool()  # a padding query sees no key: its output means nothing
    assert (got - expected)[valid].abs().max().item() < 1e-5


def test_gather_gradients_equal_the_masked_path(tokenizer, small_chunks, attention_path):
    gather, masked = sparse_pair(tokenizer, seed=1)
    ids = random_ids(tokenizer, 2, 3 * gather.config.index_topk, seed=1)
    for model in (gather, masked):
        model.train()
        model(ids, labels=ids).loss.backward()
    for (name, ours), (_, theirs) in zip(gather.named_parameters(), masked.named_parameters(), strict=True):
        if theirs.grad is None:
            assert ours.grad is None, name
            continue
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4), name


@torch.no_grad()
def test_decoding_with_a_kv_cache_equals_a_re_forward(tokenizer, attention_path):
    gather, _ = sparse_pair(tokenizer)
    gather.eval()
    prompt = random_ids(tokenizer, 1, 70)
    assert gather.config.index_topk < 70
    out = gather.generate(prompt, max_new_tokens=30, min_new_tokens=30, do_sample=False,
                          output_logits=True, return_dict_in_generate=True)
    decoded = torch.stack(out.logits, dim=1)
    refed = gather(out.sequences).logits[:, prompt.shape[1] - 1: -1]
    assert (decoded - refed).abs().max().item() < 1e-5


def test_sparse_indexer_loss_equals_the_masked_paths(tokenizer, small_chunks, attention_path):
    """The sparse phase's indexer loss, over the selected keys, from gathered or from masked probabilities."""
    gather, masked = sparse_pair(tokenizer, seed=2)
    masked.set_attn_implementation("eager")  # SDPA returns no probabilities
    ids = random_ids(tokenizer, 2, 3 * gather.config.index_topk, seed=2)
    losses = []
    for model in (gather, masked):
        with recording_indexer_scores(model) as records:
            out = model(ids, output_attentions=True)
        loss = indexer_kl_loss(out.attentions, records)
        loss.backward()
        losses.append(loss.item())
        assert all(record.scores.shape == record.selected.shape for record in records)
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    wq = [dict(model.named_parameters())["model.layers.0.self_attn.indexer.wq_b.weight"].grad for model in (gather, masked)]
    assert torch.allclose(wq[0], wq[1], atol=1e-6)


def test_sparse_gather_needs_our_attention_installed(tokenizer):
    model = build_model("glm5-tiny", tokenizer)
    model.set_attn_implementation(SPARSE_GATHER)  # transformers' own attention modules cannot run it
    with pytest.raises(ValueError, match="set_dense_attention"):
        model(random_ids(tokenizer, 1, 8))


def test_dense_switch_leaves_sparse_gather(tokenizer):
    model = build_model("glm5-tiny", tokenizer)
    set_dense_attention(model, False)
    assert model.config._attn_implementation == SPARSE_GATHER
    set_dense_attention(model, True)
    assert model.config._attn_implementation == "sdpa"


def count_selections(monkeypatch) -> list[int]:
    calls = []
    stable_topk = dsa.stable_topk
    monkeypatch.setattr(dsa, "stable_topk", lambda *args, **kwargs: calls.append(1) or stable_topk(*args, **kwargs))
    return calls


def test_no_longer_than_the_top_k_the_sparse_model_attends_densely_with_the_same_logprobs(tokenizer, monkeypatch):
    """Every key is selected when no query sees more than the top-k: the indexer is skipped and the result is
    the gather path's (the indexer still runs while it is recorded) and transformers' masked path's."""
    gather, masked = sparse_pair(tokenizer, seed=3)
    ids = random_ids(tokenizer, 2, gather.config.index_topk, seed=3)
    mask = torch.ones_like(ids)
    mask[1, :9] = 0  # left padding
    selections = count_selections(monkeypatch)
    with torch.no_grad():
        short = logprobs(gather, ids, mask)
        assert selections == []  # no indexer scoring, no top-k
        with recording_indexer_scores(gather):
            gathered = logprobs(gather, ids, mask)
        assert selections  # recording takes the indexer's path: its loss needs the scores
        expected = logprobs(masked, ids, mask)
    valid = (mask[:, :-1] * mask[:, 1:]).bool()
    assert (short - gathered)[valid].abs().max().item() < 1e-5
    assert (short - expected)[valid].abs().max().item() < 1e-5


def test_gradients_through_the_short_path_equal_the_masked_paths(tokenizer):
    gather, masked = sparse_pair(tokenizer, seed=4)
    ids = random_ids(tokenizer, 2, gather.config.index_topk - 8, seed=4)
    for model in (gather, masked):
        model.train()
        model(ids, labels=ids).loss.backward()
    for (name, ours), (_, theirs) in zip(gather.named_parameters(), masked.named_parameters(), strict=True):
        if theirs.grad is None or ours.grad is None:  # the indexer: no gradient from the main loss either way
            continue
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-5, rtol=1e-4), name


@torch.no_grad()
def test_a_generation_that_grows_past_the_top_k_keeps_the_indexer_keys_it_skipped(tokenizer, attention_path):
    """Decoding starts short (dense, indexer skipped, its keys still cached) and ends past the top-k, where the
    indexer selects over every cached key: its logits equal a re-forward's over the whole sequence."""
    gather, _ = sparse_pair(tokenizer, seed=5)
    gather.eval()
    prompt = random_ids(tokenizer, 1, 20, seed=5)
    new = 2 * gather.config.index_topk
    out = gather.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                          output_logits=True, return_dict_in_generate=True)
    decoded = torch.stack(out.logits, dim=1)
    refed = gather(out.sequences).logits[:, prompt.shape[1] - 1: -1]
    assert (decoded - refed).abs().max().item() < 1e-5


def test_sparse_latent_attention_backward_is_the_gradient():
    """The hand-written backward against finite differences, across chunks, with repeated and masked keys and a
    query that sees no key at all (a padding query)."""
    generator = torch.Generator().manual_seed(0)
    batch, queries, keys, heads, width, latent_width, topk = 2, 7, 9, 3, 6, 4, 4
    q = torch.randn(batch, queries, heads, width, dtype=torch.float64, generator=generator, requires_grad=True)
    rows = torch.randn(batch, keys, width, dtype=torch.float64, generator=generator, requires_grad=True)
    indices = torch.randint(0, keys, (batch, queries, topk), generator=generator)
    allowed = torch.rand(batch, queries, topk, generator=generator) > 0.3
    allowed[0, 2] = False

    def attend(q, rows):
        return dsa_gather.SparseLatentAttention.apply(q, rows, indices, allowed, 0.4, latent_width, 3)[0]

    assert torch.autograd.gradcheck(attend, (q, rows))


def test_attention_dropout_trains_through_the_autograd_path(tokenizer, monkeypatch):
    monkeypatch.setattr(dsa_gather, "MASKED_KEYS_PER_TOPK", 0)
    model = build_model("glm5-tiny", tokenizer, seed=3)
    set_dense_attention(model, False)
    for attention in model.modules():
        if isinstance(attention, dsa.DsaAttention):
            attention.attention_dropout = 0.5
    ids = random_ids(tokenizer, 2, 2 * model.config.index_topk, seed=3)
    model.eval()
    with torch.no_grad():
        plain = model(ids).logits
    model.train()
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert not torch.allclose(model(ids).logits, plain)  # dropout acted
    assert model.model.layers[0].self_attn.kv_b_proj.weight.grad.abs().sum() > 0
