"""Each distinct prompt computed once (model/shared_prompts.py): the same logprobs and gradients as a forward of every
prompt + response row, the routers' load counted over the tokens actually run, and the routing replay given each
forward's own positions."""

import random

import pytest
import torch

from model.dsa import install_dsa_indexers, set_dense_attention
from model.logprobs import scored_logprobs
from model.moe_balance import RouterLoad
from model.presets import build_model
from model.routing import ReplayedRouting, RoutingLayout
from model.shared_prompts import shared_prompt_logprobs
from stages.common.rl_batches import padded_batch


def groups(vocab: int, seed: int = 0, prompts: tuple[int, int] = (5, 30), responses: tuple[int, int] = (1, 45)):
    """Four prompts of 5-30 tokens, eight responses of 1-45 tokens each, shuffled: some rows pass the top-k of 48
    keys, so the indexer's selection is exercised as well as the dense short path."""
    rng = random.Random(seed)
    rows = []
    for _ in range(4):
        prompt = [rng.randrange(5, vocab) for _ in range(rng.randint(*prompts))]
        for _ in range(8):
            response = [rng.randrange(5, vocab) for _ in range(rng.randint(*responses))]
            rows.append((prompt, response, [1] * len(response), [0.0] * len(response)))
    rng.shuffle(rows)
    return padded_batch(rows, 0)


@pytest.fixture
def model(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0).eval()
    install_dsa_indexers(model)
    set_dense_attention(model, False)
    return model


def gradients(model) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_each_prompt_once_gives_every_row_s_logprobs_and_gradients(model, tokenizer, temperature):
    batch = groups(len(tokenizer))
    assert int(batch.attention_mask.sum(dim=1).max()) > model.config.index_topk
    every_row = scored_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature)
    (every_row * torch.linspace(0.5, 1.5, every_row.shape[1])).sum().backward()
    expected = gradients(model)
    shared = shared_prompt_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask,
                                    batch.prompt_lengths, temperature)
    (shared * torch.linspace(0.5, 1.5, shared.shape[1])).sum().backward()
    got = gradients(model)

    scored = batch.response_mask.bool()
    assert torch.equal(shared[~scored], torch.zeros(int((~scored).sum())))
    assert torch.allclose(shared[scored], every_row[scored], atol=2e-5)
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        assert torch.allclose(got[name], grad, atol=1e-5, rtol=1e-4), name


def test_the_routers_count_each_distinct_prompt_once_and_no_padding(model, tokenizer):
    batch = groups(len(tokenizer), seed=1)
    load = RouterLoad(model)
    shared_prompt_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask, batch.prompt_lengths)
    distinct = {tuple(ids[:length]) for ids, length in zip(batch.input_ids.tolist(), batch.prompt_lengths.tolist(),
                                                            strict=True)}
    responses = int(batch.attention_mask.sum()) - int(batch.prompt_lengths.sum())
    tokens = sum(len(prompt) for prompt in distinct) + responses
    counts = load.take()
    assert counts.sum(dim=1).tolist() == [tokens * model.config.num_experts_per_tok] * counts.shape[0]


def test_a_prompt_inside_the_scored_targets_is_refused(model, tokenizer):
    batch = groups(len(tokenizer))
    scored = batch.response_mask.clone()
    scored[0, 0] = 1
    with pytest.raises(ValueError, match="inside its prompt"):
        shared_prompt_logprobs(model, batch.input_ids, batch.attention_mask, scored, batch.prompt_lengths)


def test_replay_hands_each_forward_its_own_positions_of_the_engine_s_experts(model, tokenizer):
    batch = groups(len(tokenizer), seed=2)
    layout = RoutingLayout.of(model)
    # Experts the trainer would not pick on its own (the reverse of its usual top-k order is a valid set too):
    # every known position's experts, different per position, -1 where the engine ran nothing.
    generator = torch.Generator().manual_seed(0)
    experts = torch.stack([torch.randperm(model.config.n_routed_experts, generator=generator)[:layout.top_k]
                           for _ in range(batch.input_ids.numel() * len(layout.moe_layers))])
    experts = experts.view(*batch.input_ids.shape, len(layout.moe_layers), layout.top_k).to(torch.int32)
    experts[~batch.attention_mask.bool()] = -1
    # The engine prefilled every member of a group alike, except one member's prompt, routed otherwise: that row
    # is its own prompt then, through its own experts.
    first = {}
    for row, (ids, length) in enumerate(zip(batch.input_ids.tolist(), batch.prompt_lengths.tolist(), strict=True)):
        experts[row, :length] = experts[first.setdefault(tuple(ids[:length]), row), :length]
    odd = next(row for row in range(len(experts)) if row not in first.values())
    experts[odd, 0] = (experts[odd, 0] + 1) % model.config.n_routed_experts  # another set of experts
    replayed = ReplayedRouting(model)
    with replayed.replaying(experts, True):
        every_row = scored_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
    plain_agreement = replayed.agreement()

    def before_pass(pass_layout):
        replayed.given(pass_layout(experts, -1))

    with replayed.replaying(experts, True):
        shared = shared_prompt_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask,
                                        batch.prompt_lengths, before_pass=before_pass, routed_experts=experts)
    scored = batch.response_mask.bool()
    assert torch.allclose(shared[scored], every_row[scored], atol=2e-5)  # through the same given experts
    assert plain_agreement < 0.9 and replayed.agreement() < 0.9  # they were not the router's own


# Within the top-k of 48 keys the response pass attends every key in MLA's latent space; past 8 × 48 it gathers the
# selected keys; both read the latents through kv_b_proj's weight (dsa_gather's absorbed attention).
@pytest.mark.parametrize(("prompts", "responses"), [((5, 15), (1, 20)), ((150, 190), (200, 230))],
                         ids=["every key", "gathered keys"])
def test_lora_adapters_count_in_the_attention_after_the_cache(model, tokenizer, prompts, responses):
    """Under LoRA kv_b_proj's weight is the base plus the adapters' update, or the trainer would compute another
    model than the merged one its engines serve, and the adapters would get no gradient through it."""
    from peft import LoraConfig, inject_adapter_in_model

    inject_adapter_in_model(LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["kv_b_proj"]), model)
    with torch.no_grad():
        # Every key scores 0, so the selection is the tie rule's alone (the newest keys): the same in both
        # computations. An untrained indexer's near-ties over hundreds of keys could select otherwise under
        # another rounding, which is not what this test is about.
        for layer in model.model.layers:
            layer.self_attn.indexer.weights_proj.weight.zero_()
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # peft starts B at zero: an adapter that has trained is not
                parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    batch = groups(len(tokenizer), seed=3, prompts=prompts, responses=responses)
    every_row = scored_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
    every_row.sum().backward()
    expected = gradients(model)
    shared = shared_prompt_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask,
                                    batch.prompt_lengths)
    shared.sum().backward()
    got = gradients(model)
    scored = batch.response_mask.bool()
    assert torch.allclose(shared[scored], every_row[scored], atol=2e-5)
    adapters = [name for name in expected if "lora_" in name]
    assert adapters
    for name in adapters:  # over hundreds of keys float rounding sums up: relative to the gradient's norm
        assert (got[name] - expected[name]).norm() <= 1e-4 * expected[name].norm(), name
