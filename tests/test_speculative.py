"""Speculative decoding with the MTP layer's drafts (rollout/engine/speculative.py): greedy output token for token the
model's own, sampled output distributed as plain sampling's, the model's logprobs returned, acceptance counted."""

import pytest
import torch
from pydantic import ValidationError
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM

from model.dsa import set_dense_attention
from model.mtp import attach_mtp, mtp_layer, self_attention
from model.presets import PRESETS, load_model
from rollout.engine.drafter import Drafter
from rollout.engine.generation import Engine
from rollout.engine.sampling import sampling_distribution
from rollout.engine_settings import EngineSettings
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams, UniformBatch

VOCAB = 8  # small enough that the draft's guesses often stand and often fall


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """glm5-tiny's shape over an 8-token vocabulary, with its MTP layer; nothing stops it (no EOS)."""
    directory = tmp_path_factory.mktemp("small-vocabulary")
    config = GlmMoeDsaConfig(**PRESETS["glm5-tiny"], vocab_size=VOCAB, pad_token_id=0, eos_token_id=[],
                             bos_token_id=None, tie_word_embeddings=False, routed_scaling_factor=1.0,
                             max_position_embeddings=512)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GlmMoeDsaForCausalLM(config)
        attach_mtp(model)
        with torch.no_grad():  # sharper than an untrained model's near-uniform next-token distributions
            model.lm_head.weight.mul_(30.0)
    model.save_pretrained(directory)
    return directory


def prompts(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def test_greedy_output_is_the_model_s_own_token_for_token(checkpoint):
    plain, speculative = Engine(checkpoint), Engine(checkpoint, speculative_steps=3)
    # Two prompts past the DSA top-k (48 keys) from the start, one reaching it while decoding, one short.
    batch = UniformBatch(prompts((56, 23, 70, 5)), SamplingParams(temperature=0.0, max_new_tokens=40),
                         return_logprob=True)
    expected, _ = plain.generate(batch)
    got, _ = speculative.generate(batch)
    for want, have in zip(expected, got, strict=True):
        assert have.output_ids == want.output_ids and have.finish_reason == want.finish_reason
        assert have.output_logprobs == pytest.approx(want.output_logprobs, abs=1e-5)
        assert want.spec_verify_ct is None and have.spec_num_proposed_drafts == 3 * have.spec_verify_ct
        # Every token after the prefill's came from a verification step: one each, and the drafts kept.
        assert have.spec_verify_ct + have.spec_num_correct_drafts == len(have.output_ids) - 1
    # Drafts stood (fewer verification steps than tokens after the first) and drafts fell: both branches ran.
    assert 0 < sum(c.spec_num_correct_drafts for c in got) < sum(c.spec_num_proposed_drafts for c in got)


def test_routed_experts_are_those_plain_decoding_records(checkpoint):
    """Routing replay under speculation: every position's experts, prompt and completion, as decoding a token at a time
    records them (greedy, so both decode the same tokens)."""
    plain, speculative = Engine(checkpoint), Engine(checkpoint, speculative_steps=3)
    batch = UniformBatch(prompts((56, 23, 5), seed=2), SamplingParams(temperature=0.0, max_new_tokens=30),
                         return_routed_experts=True)
    expected, _ = plain.generate(batch)
    got, _ = speculative.generate(batch)
    for want, have in zip(expected, got, strict=True):
        assert have.output_ids == want.output_ids
        assert have.routed_experts.shape == want.routed_experts.shape
        assert (have.routed_experts == want.routed_experts).mean() > 0.99  # near-tied router scores may flip
    assert sum(c.spec_num_correct_drafts for c in got) > 0


# Rows that end at different steps: with a context of 80, budgets of 24, 40, 10 and 40 tokens.
STAGGERED = dict(lengths=(56, 23, 70, 5), max_context=80, max_new_tokens=40)


def test_speculation_taking_over_from_plain_decoding_once_few_rows_decode(checkpoint):
    """With `speculative_max_rows` 2, a batch of 4 decodes plainly until two rows have ended, then speculates: greedy
    tokens and the experts routed at every position are plain decoding's; the rows that ended first never
    speculated, the others did (whether the draft's guesses are right is the next test's: with random weights few
    of them stand)."""
    plain = Engine(checkpoint, max_context=STAGGERED["max_context"])
    speculative = Engine(checkpoint, max_context=STAGGERED["max_context"], speculative_steps=3, speculative_max_rows=2)
    batch = UniformBatch(prompts(STAGGERED["lengths"], seed=4),
                         SamplingParams(temperature=0.0, max_new_tokens=STAGGERED["max_new_tokens"]),
                         return_logprob=True, return_routed_experts=True)
    expected, _ = plain.generate(batch)
    got, _ = speculative.generate(batch)
    assert [len(c.output_ids) for c in expected] == [24, 40, 10, 40]
    for want, have in zip(expected, got, strict=True):
        assert have.output_ids == want.output_ids and have.finish_reason == want.finish_reason
        assert have.output_logprobs == pytest.approx(want.output_logprobs, abs=1e-5)
        assert (have.routed_experts == want.routed_experts).mean() > 0.99
    assert [c.spec_verify_ct for c in got[::2]] == [0, 0]  # ended while four, then three rows decoded
    for late in got[1::2]:  # 24 tokens decoded plainly first, the other 16 by verification steps (1 + drafts kept)
        assert 0 < late.spec_verify_ct and late.spec_verify_ct + late.spec_num_correct_drafts == 16


def test_an_engine_server_speculates_only_once_few_rows_decode(checkpoint, tmp_path):
    """`engines.speculative_max_rows` reaches the engine a stage starts: with 1, a batch of three rows that all run to
    their length never speculates, a single row does from its first token on."""
    settings = EngineSettings(speculative_steps=2, speculative_max_rows=1)
    with EngineProcess(str(checkpoint), tmp_path / "engine.log", threads=1, **settings.decoding()) as client:
        params = SamplingParams(temperature=0.0, max_new_tokens=12)
        together = client.generate(prompts((9, 14, 20), seed=5), params)
        alone = client.generate(prompts((14,), seed=5), params)
    assert [len(s.output_ids) for s in together + alone] == [12] * 4
    assert all(s.spec_verify_ct is None for s in together)
    # Every token but the prefill's came from verification steps.
    assert alone[0].spec_verify_ct > 0 and alone[0].speculated_tokens == 11


def test_a_bound_on_speculation_that_is_off_is_refused_by_name():
    with pytest.raises(ValidationError, match="engines.speculative_max_rows bounds speculative decoding, which is off"):
        EngineSettings(speculative_max_rows=8)


@torch.inference_mode()
def test_the_draft_takes_over_from_the_columns_plain_decoding_computed(checkpoint):
    """What the draft reads when it takes over (the backlog: the model's hidden states, tokens, positions over
    every cache column) is what a prefill of the same tokens computes, for the row left decoding."""
    engine = Engine(checkpoint, max_context=STAGGERED["max_context"], speculative_steps=2, speculative_max_rows=1)
    taken_over = []
    resume = engine.speculative.resume

    def recording(backlog, tokens, *args):
        taken_over.append({name: backlog[name].clone() for name in ("hidden", "ids", "positions", "visible")})
        return resume(backlog, tokens, *args)

    engine.speculative.resume = recording
    rows = prompts(STAGGERED["lengths"][:3], seed=4)  # budgets 24, 40, 10: two rows end before the third
    got, _ = engine.generate(UniformBatch(rows, SamplingParams(temperature=0.0, max_new_tokens=40)))
    (backlog,) = taken_over
    # Taken over as the first row took its last token (it leaves the batch there): the second row is the last, 24
    # tokens in, the last of them not yet fed.
    last = backlog["visible"][-1]
    assert got[1].spec_verify_ct > 0 and backlog["ids"].shape[0] == 2 and int(last.sum()) == 23 + 24 - 1
    sequence = torch.tensor([rows[1] + got[1].output_ids[:23]])
    prefilled = engine.model.get_decoder()(input_ids=sequence).last_hidden_state[0]
    assert torch.equal(backlog["ids"][-1, last], sequence[0])
    assert torch.equal(backlog["positions"][-1, last], torch.arange(sequence.shape[1]))
    assert (backlog["hidden"][-1, last] - prefilled).abs().max() < 1e-4


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0, max_new_tokens=3),
                                    SamplingParams(temperature=0.7, top_k=5, max_new_tokens=3)],
                         ids=["plain", "top-k"])
def test_sampled_tokens_are_distributed_as_the_model_samples_them(checkpoint, params):
    """The third token's marginal over 4,000 draws against its exact distribution Σ p(t1) p(t2|t1) p(t3|t1 t2)
    (the model's, after the same truncation), by a chi-square test; the rule's accepted and rejected drafts both
    occur."""
    prompt = prompts((30,), seed=1)[0]
    engine = Engine(checkpoint, seed=5, speculative_steps=2)
    draws, steps = 4000, 0
    counts = torch.zeros(VOCAB)
    for _batch in range(0, draws, 500):
        completions, _ = engine.generate(UniformBatch([prompt] * 500, params, return_logprob=True))
        for completion in completions:
            counts[completion.output_ids[2]] += 1
            steps += completion.spec_verify_ct
    # The first token comes from the prefill; one step gives the other two where a draft stands, two where none do.
    assert draws < steps < 2 * draws
    exact = exact_third_token(checkpoint, prompt, params)
    expected = exact * draws
    seen = expected > 0
    assert counts[~seen].sum() == 0  # nothing outside the truncation
    chi_square = float(((counts[seen] - expected[seen]) ** 2 / expected[seen]).sum())
    assert chi_square < 24.3  # 7 degrees of freedom at most, p = 0.001


def test_sampled_tokens_after_a_hand_over_are_distributed_as_the_model_samples_them(checkpoint):
    """The same chi-square test across the switch from plain decoding: 500 rows of the prompt and one more row whose
    budget is two tokens (a context of 33). With the bound at 500 rows, the first token comes from the prefill, the
    second from a plain step, and the third from a verification step after the draft took over (the extra row has
    ended): the draft read a backlog with a plain step's column and left padding in it."""
    params = SamplingParams(temperature=1.0, max_new_tokens=3)
    prompt, other = prompts((30,), seed=1)[0], prompts((31,), seed=2)[0]
    engine = Engine(checkpoint, seed=5, speculative_steps=2, speculative_max_rows=500, max_context=33)
    counts, draws = torch.zeros(VOCAB), 0
    for _batch in range(8):
        completions, _ = engine.generate(UniformBatch([prompt] * 500 + [other], params))
        assert len(completions[-1].output_ids) == 2 and not completions[-1].spec_verify_ct
        for completion in completions[:-1]:
            assert len(completion.output_ids) == 3 and completion.spec_verify_ct == 1  # the third token's step
            counts[completion.output_ids[2]] += 1
            draws += 1
    expected = exact_third_token(checkpoint, prompt, params) * draws
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 24.3  # 7 degrees of freedom, p = 0.001


def exact_third_token(checkpoint, prompt, params) -> torch.Tensor:
    model = load_model(checkpoint).eval()
    set_dense_attention(model, dense=False)

    def next_distribution(prefixes):
        with torch.no_grad():
            logits = model(torch.tensor(prefixes)).logits[:, -1].float()
        probs, _ = sampling_distribution(logits, params)
        return probs / probs.sum(dim=-1, keepdim=True)

    first = next_distribution([prompt])[0]
    pairs = [(a, b) for a in range(VOCAB) for b in range(VOCAB)]
    second = next_distribution([prompt + [a] for a in range(VOCAB)])  # [t1, t2]
    third = next_distribution([prompt + [a, b] for a, b in pairs]).view(VOCAB, VOCAB, VOCAB)
    return torch.einsum("a,ab,abc->c", first, second, third)


def test_a_checkpoint_without_an_mtp_layer_cannot_speculate_and_says_so(tokenizer, tmp_path):
    config = GlmMoeDsaConfig(**(PRESETS["glm5-tiny"] | {"num_nextn_predict_layers": 0}), vocab_size=VOCAB,
                             pad_token_id=0, eos_token_id=[], tie_word_embeddings=False)
    GlmMoeDsaForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="MTP layer"):
        Engine(tmp_path, speculative_steps=2)


@torch.inference_mode()
def test_the_drafter_computes_the_mtp_layer_s_own_forward(checkpoint):
    """The drafter's lean operations (rollout/engine/drafter.py) against the MTP layer's modules as its loss runs
    them: over a prompt's positions (`extend`) and one chained position after them (`chain`)."""
    model = load_model(checkpoint)
    set_dense_attention(model, False)
    layer, generator = mtp_layer(model), torch.Generator().manual_seed(0)
    for name, parameter in layer.named_parameters():  # norms away from their init of ones, which hides a swap
        if "norm" in name:
            parameter.uniform_(0.5, 1.5, generator=generator)
    drafter = Drafter(model)
    ids = torch.tensor(prompts((30, 30), seed=3))
    batch, length = ids.shape
    hidden = model.get_decoder()(input_ids=ids).last_hidden_state
    following = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)
    positions = torch.arange(1, length + 1).expand(batch, -1)

    def module_forward(inputs, tokens, at):
        x = layer.project(inputs, model.get_input_embeddings()(tokens))
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril().expand(batch, 1, -1, -1)
        return layer.feed_forward(x, self_attention(layer, model, x, at, causal))

    cache, outputs = drafter.extend(None, hidden, following, positions, torch.ones_like(ids, dtype=torch.bool))
    assert (outputs - module_forward(hidden, following, positions)).abs().max() < 1e-4
    token = drafter.logits(outputs[:, -1]).argmax(-1)
    chained = drafter.chain(cache, outputs[:, -1], token, positions[:, -1] + 1, 0)
    expected = module_forward(torch.cat([hidden, outputs[:, -1:]], dim=1), torch.cat([following, token[:, None]], 1),
                              torch.arange(1, length + 2).expand(batch, -1))[:, -1]
    assert (chained - expected).abs().max() < 1e-4
    assert (drafter.logits(chained) - model.lm_head(layer.shared_head.norm(expected))).abs().max() < 1e-3
