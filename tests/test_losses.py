"""SFT loss against values computed by hand on 2-3 token examples."""

import math

import torch

from stages.sft.objective import sft_loss, trained_positions


def logits_for(probabilities):
    """Logits whose softmax is exactly `probabilities` (log of them)."""
    return torch.tensor(probabilities, dtype=torch.float32).log()


def full_sft_loss(logits, input_ids, loss_mask):
    """The loss from logits at every position, the way SftObjective selects the trained ones."""
    samples, positions = trained_positions(loss_mask)
    return sft_loss(logits[samples, positions], input_ids[samples, positions + 1], samples, len(input_ids))


def test_sft_loss_is_the_mean_over_samples_of_the_masked_token_mean():
    # Vocab of 2. Sample A: 3 tokens, both targets trained; sample B: 3 tokens, only the last trained.
    logits = torch.stack([
        logits_for([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]]),
        logits_for([[0.8, 0.2], [0.4, 0.6], [0.5, 0.5]]),
    ])
    input_ids = torch.tensor([[0, 1, 0], [1, 0, 1]])
    loss_mask = torch.tensor([[0, 1, 1], [0, 0, 1]])
    # A predicts 1 from position 0 (p=.75) and 0 from position 1 (p=.5); B predicts 1 from position 1 (p=.6).
    sample_a = (-math.log(0.75) - math.log(0.5)) / 2
    sample_b = -math.log(0.6)
    expected = (sample_a + sample_b) / 2
    assert torch.isclose(full_sft_loss(logits, input_ids, loss_mask), torch.tensor(expected), atol=1e-6)


def test_a_sample_without_trained_tokens_does_not_count():
    logits = torch.stack([logits_for([[0.25, 0.75], [0.5, 0.5]]), logits_for([[0.5, 0.5], [0.5, 0.5]])])
    input_ids = torch.tensor([[0, 1], [0, 0]])
    loss_mask = torch.tensor([[0, 1], [0, 0]])
    assert torch.isclose(full_sft_loss(logits, input_ids, loss_mask), torch.tensor(-math.log(0.75)), atol=1e-6)


def test_masked_tokens_get_no_gradient():
    logits = logits_for([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]]).unsqueeze(0).requires_grad_(True)
    full_sft_loss(logits, torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 0]])).backward()
    # Only position 0 predicts a trained token; positions 1 and 2 get nothing.
    assert logits.grad[0, 0].abs().sum() > 0
    assert torch.equal(logits.grad[0, 1:], torch.zeros(2, 2))


def test_a_batch_without_trained_tokens_has_zero_loss_and_a_graph():
    logits = logits_for([[0.5, 0.5], [0.5, 0.5]]).unsqueeze(0).requires_grad_(True)
    loss = full_sft_loss(logits, torch.tensor([[0, 1]]), torch.tensor([[0, 0]]))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros(1, 2, 2))
