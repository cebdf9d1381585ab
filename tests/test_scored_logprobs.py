"""The trainer's logprobs at the scored positions alone equal the full projection's, values and gradients."""

import pytest
import torch

from model.dsa import set_dense_attention
from model.logprobs import next_token_logprobs, scored_logprobs
from model.presets import build_model


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scoring_only_the_response_positions_changes_no_value_and_no_gradient(tokenizer, temperature):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    set_dense_attention(model, False)
    ids = torch.randint(5, len(tokenizer), (3, 30), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[2, 25:] = 0  # right padding, as a TrainBatch pads
    scored = torch.zeros(3, 29)
    scored[0, 10:20] = 1
    scored[1, 5:] = 1
    scored[2, 12:24] = 1

    kept = scored_logprobs(model, ids, mask, scored, temperature)
    (kept * scored).sum().backward()
    kept_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    full = next_token_logprobs(model(input_ids=ids, attention_mask=mask).logits, ids, temperature)
    (full * scored).sum().backward()

    assert torch.equal(kept[scored == 0], torch.zeros(int((scored == 0).sum())))
    assert torch.allclose(kept[scored == 1], full[scored == 1], atol=1e-6)
    assert kept_grads.keys() == {name for name, p in model.named_parameters() if p.grad is not None}
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            assert torch.allclose(kept_grads[name], parameter.grad, atol=1e-6), name
