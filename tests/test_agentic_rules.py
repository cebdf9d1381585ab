"""Agentic RL's rules against hand-computed values: the importance-sampling loss, staleness, group refill, context folding."""

import math

import pytest
import torch

from stages.agentic.groups import is_stale, refill_group
from stages.agentic.importance import ImportanceSettings
from stages.agentic.loss import centred_advantages, direct_is_loss, importance_mask


def logs(*probabilities):
    return torch.log(torch.tensor([probabilities], dtype=torch.float64))


def test_the_mask_keeps_ratios_strictly_inside_both_bounds():
    rollout = logs(0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
    # ratios 0.79, 0.8 (the lower bound itself), 0.81, 1.27, 1.28 (the upper bound), 1.29
    new = logs(0.395, 0.4, 0.405, 0.635, 0.64, 0.645)
    assert importance_mask(new, rollout, ImportanceSettings(eps_low=0.2, eps_high=0.28)).tolist() == [[0, 0, 1, 1, 0, 0]]


def test_loss_is_the_masked_ratio_weighted_advantage_over_generated_tokens():
    rollout = logs(0.5, 0.5, 0.5)
    new = logs(0.6, 0.3, 0.5).requires_grad_(True)  # ratios 1.2 (kept), 0.6 (dropped), 1.0 (kept)
    mask = torch.tensor([[1, 1, 0]])  # the third token came from the environment
    loss, stats = direct_is_loss(new, rollout, torch.tensor([2.0], dtype=torch.float64), mask)
    # Kept generated tokens: only the first (ratio 1.2); mean over the 2 generated tokens.
    assert loss.item() == pytest.approx(-(1.2 * 2.0) / 2)
    loss.backward()
    # d/dlogp of −r·A/2 is −r·A/2 on the kept token, 0 on the dropped and the environment's.
    assert new.grad.tolist()[0] == pytest.approx([-1.2 * 2.0 / 2, 0.0, 0.0])
    assert stats["is_masked_fraction"] == pytest.approx(0.5)
    assert stats["logp_gap_max"] == pytest.approx(abs(math.log(0.6)))


def test_advantages_are_mean_centred_without_std_division():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    assert centred_advantages(rewards).tolist() == [[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]]


def test_a_batch_without_generated_tokens_is_refused():
    with pytest.raises(ValueError, match="no model-generated tokens"):
        direct_is_loss(logs(0.5), logs(0.5), torch.tensor([1.0]), torch.tensor([[0]]))


def test_staleness_counts_from_the_oldest_weights_a_sample_saw():
    assert not is_stale([3, 4, 5], current_version=5, tau=2)
    assert is_stale([2, 5], current_version=5, tau=2)  # one turn from w_2 is enough to be too old
    assert not is_stale([5], current_version=5, tau=0)
    with pytest.raises(ValueError):
        is_stale([], 1, 1)


def test_groups_with_more_than_half_valid_are_refilled_in_order_and_the_rest_dropped():
    assert refill_group(["a", "b", "c"], 4) == ["a", "b", "c", "a"]
    assert refill_group(["a", "b", "c", "d", "e"], 8) == ["a", "b", "c", "d", "e", "a", "b", "c"]
    assert refill_group(["a", "b"], 4) is None  # exactly G/2 is not more than G/2
    assert refill_group([], 2) is None
    assert refill_group(["a", "b"], 2) == ["a", "b"]


def test_context_keeps_recent_results_and_discards_the_history_past_the_threshold():
    from rollout.agents.context import EpisodeContext

    context = EpisodeContext([1, 2], keep_recent=2, discard_above=20)
    for r in range(3):  # model ids 10+r, env ids 20+r (3 tokens), placeholder 9
        context.add_round([10 + r], [20 + r] * 3, [9])
    # Round 0 is older than the last 2: its result shows as the placeholder; model ids stay exact.
    assert context.next_prompt() == [1, 2, 10, 9, 11, 21, 21, 21, 12, 22, 22, 22]
    context.add_round([13], [23] * 3, [9])
    context.add_round([14], [24] * 3, [9])
    # 2 + 3 rounds shown as 1+1 tokens + 2 recent as 1+3 = 2 + 6 + 8 = 16 ≤ 20: kept.
    assert len(context.next_prompt()) == 16 and context.discards == 0
    context.add_round([15, 15, 15, 15, 15], [25] * 3, [9])
    # 2 + 4·2 + (1+3) + (5+3) = 22 > 20: the tool history goes; the episode restarts from the prompt.
    assert context.next_prompt() == [1, 2] and context.discards == 1
    context.add_round([16], [26] * 3, [9])
    assert context.next_prompt() == [1, 2, 16, 26, 26, 26]  # only rounds since the discard


def _result(rollout_id, status="ok", reward=1.0, versions=(3,), failure=None):
    from rollout.agents.orchestrator import RolloutResult, RolloutSpec

    spec = RolloutSpec(rollout_id, "g", "search", {"id": "p"})
    return RolloutResult(spec, [{"sample_id": f"{rollout_id}/0"}], None if status == "env_error" else reward, status,
                         failure, list(versions))


def test_a_group_loses_its_environment_failures_and_stale_samples_then_is_refilled_or_dropped():
    from stages.agentic.rollouts import Group, usable_group

    crashed = _result("c", status="env_error", failure="http://127.0.0.1:1/step unreachable: ConnectError")
    group = Group("g", "search", [_result("a"), _result("b", reward=0.0), _result("d", versions=(1, 3)), crashed], "p",
                  outside_band=False)
    verdict = usable_group(group, group_size=4, current_version=3, tau=1)
    # d is stale (3 − 1 > 1) and c crashed: 2 of 4 left, not more than G/2, so the group goes.
    assert verdict.results is None and verdict.stale == 1 and verdict.env_failures == {"unreachable": 1}
    verdict = usable_group(group, group_size=4, current_version=3, tau=2)
    # With τ = 2, d stays: 3 valid of 4 are refilled in order; the crash is never scored as a 0.
    assert [r.spec.rollout_id for r in verdict.results] == ["a", "b", "d", "a"]
