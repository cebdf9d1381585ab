"""GRPO + IcePop against values worked out by hand (SPEC "Reasoning RL")."""

import math

import pytest
import torch

from stages.common.icepop import IcePopSettings
from stages.common.icepop_loss import group_advantages, grpo_icepop_loss, zero_signal_groups
from stages.grpo.rewards import informative_groups


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def loss_of(logp_new, logp_old, logp_infer, advantages, mask=None):
    logp_new = t(logp_new).requires_grad_(True)
    mask = t(mask) if mask is not None else torch.ones_like(logp_new)
    loss, stats = grpo_icepop_loss(logp_new, t(logp_old), t(logp_infer), t(advantages), mask)
    return loss, stats, logp_new


def test_advantages_are_std_normalized_within_each_group():
    advantages = group_advantages(t([[1, 0, 0, 1], [3, 3, 3, 3], [0, 0, 0, 2]]))
    # Group 1: mean 0.5, sample std sqrt(1/3); group 3: mean 0.5, sample std 1.
    third = 0.5 / math.sqrt(1 / 3)
    assert torch.allclose(advantages[0], t([third, -third, -third, third]), atol=1e-5)
    assert torch.equal(advantages[1], t([0, 0, 0, 0]))  # all-equal group: no signal, no NaN
    assert torch.allclose(advantages[2], t([-0.5, -0.5, -0.5, 1.5]), atol=1e-5)
    assert zero_signal_groups(t([[1, 0, 0, 1], [3, 3, 3, 3], [0, 0, 0, 0]])) == 2
    with pytest.raises(ValueError, match="G ≥ 2"):
        group_advantages(t([[1], [0]]))


def test_loss_is_a_mean_over_sequences_of_per_token_means():
    # Sequence 1: one token, A = 2. Sequence 2: three tokens, A = 1. r = ρ = 1 everywhere.
    zeros = [[0, 0, 0], [0, 0, 0]]
    loss, _, _ = loss_of(zeros, zeros, zeros, [2, 1], mask=[[1, 0, 0], [1, 1, 1]])
    # Per sequence: 2 and 1; their mean is 1.5. A token mean over the batch would give (2 + 3) / 4.
    assert loss.item() == pytest.approx(-1.5)


def test_ratio_is_clipped_at_both_epsilons_only_on_the_side_that_gains():
    log = math.log
    # r = 1.5 and 0.5, each with a positive and a negative advantage; one token per sequence.
    logp_new = [[log(1.5)], [log(0.5)], [log(0.5)], [log(1.5)]]
    zeros = [[0.0]] * 4
    loss, stats, _ = loss_of(logp_new, zeros, zeros, [1, -1, 1, -1])
    # min(1.5, 1.28) = 1.28; min(-0.5, -0.8) = -0.8; min(0.5, 0.8) = 0.5; min(-1.5, -1.28) = -1.5.
    assert loss.item() == pytest.approx(-(1.28 - 0.8 + 0.5 - 1.5) / 4)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_icepop_keeps_tokens_inside_the_band_weighted_by_rho_and_drops_the_rest():
    log = math.log
    rhos = [1.999, 2.001, 0.5001, 0.4999]  # just inside and just outside both bounds (β = 2)
    logp_old = [[log(rho) for rho in rhos]]
    loss, stats, logp_new = loss_of(logp_old, logp_old, [[0.0] * 4], [1.0])
    # r = 1 and A = 1: the kept tokens contribute ρ, the popped ones 0, over 4 tokens.
    assert loss.item() == pytest.approx(-(1.999 + 0.5001) / 4)
    assert stats["pop_masked_fraction"] == pytest.approx(0.5)
    assert stats["logp_gap_max"] == pytest.approx(log(2.001))
    loss.backward()
    # d(-ρ·r·A/4)/d(logp_new) = -ρ·r·A/4 where kept, and exactly 0 where popped.
    assert torch.allclose(logp_new.grad, t([[-1.999 / 4, 0.0, -0.5001 / 4, 0.0]]))


def test_padding_is_ignored_and_empty_responses_are_refused():
    padded, _, _ = loss_of([[0.0, 5.0]], [[0.0, -5.0]], [[0.0, 9.0]], [1.0], mask=[[1, 0]])
    assert padded.item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="response 1 has no tokens"):
        loss_of([[0.0], [0.0]], [[0.0], [0.0]], [[0.0], [0.0]], [1.0, 1.0], mask=[[1], [0]])


def test_settings_change_the_band_and_the_clip():
    log = math.log
    loss, _ = grpo_icepop_loss(
        t([[log(1.5)]]), t([[log(2.5)]]), t([[0.0]]), t([1.0]), t([[1.0]]),
        IcePopSettings(beta=3.0, eps_low=0.1, eps_high=0.1),
    )
    # ρ = 2.5 is inside β = 3; r = 1.5 / 2.5 = 0.6, clip(0.6, 0.9, 1.1) = 0.9; min(0.6, 0.9) = 0.6.
    assert loss.item() == pytest.approx(-2.5 * 0.6)


def test_groups_with_signal_are_chosen_first_and_the_rest_fill_up():
    rewards = t([[1, 1, 1], [0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 1, 1]])
    assert informative_groups(rewards, [True] * 5, 2) == [1, 3]
    # A dropped group (an unscorable sample) is not preferred even when its rewards differ.
    assert informative_groups(rewards, [True, False, True, True, True], 3) == [3, 4, 0]
    assert informative_groups(t([[1, 1], [0, 0]]), [True, True], 2) == [0, 1]
