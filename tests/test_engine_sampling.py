"""The engine's sampler: draws follow the distribution, never pick an excluded token, and are seeded."""

import torch

from rollout.engine.sampling import draw, sample
from rollout.protocol import SamplingParams


def test_draw_frequencies_follow_the_weights_and_zero_weights_are_never_drawn():
    weights = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(40_000, 1)
    counts = torch.bincount(draw(weights, torch.Generator().manual_seed(0)), minlength=6)
    assert counts[[0, 2, 5]].tolist() == [0, 0, 0]
    assert torch.allclose(counts[[1, 3, 4]] / 40_000, torch.tensor([0.5, 0.3, 0.2]), atol=0.01)


def test_draw_takes_unnormalised_weights_per_row():
    weights = torch.tensor([[3.0, 0.0], [0.0, 7.0]])
    assert draw(weights, torch.Generator().manual_seed(1)).tolist() == [0, 1]


def test_sampling_is_seeded_and_top_p_drops_the_tail():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.06, 0.04]])).repeat(5_000, 1)
    params = SamplingParams(temperature=1.0, top_p=0.85, max_new_tokens=1)
    tokens, logprobs = sample(logits, params, torch.Generator().manual_seed(3))
    again, _ = sample(logits, params, torch.Generator().manual_seed(3))
    assert torch.equal(tokens, again)
    assert set(tokens.tolist()) == {0, 1}  # 0.6 + 0.3 reaches 0.85: tokens 2 and 3 are cut
    # Logprobs are those of the untruncated softmax, which is what the trainer recomputes.
    assert torch.allclose(logprobs, torch.log(torch.tensor([0.6, 0.3]))[tokens], atol=1e-6)
