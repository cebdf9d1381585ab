"""Which finished rollouts agentic RL trains on: the staleness filter and the group-refill rule; the reward
a rollout is trained with; and what a group tells of its prompt's difficulty.

SPEC "Agentic RL": a sample records every weight version it was generated under (w_0 < … < w_k) and
is dropped once the trainer's version has moved more than τ past w_0. A sample whose environment
crashed is not the model's failure and is removed; a group keeps training only if more than G/2 of
its samples remain, refilled to G by repeating them in order, so its advantage baseline stays a
mean over G.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Item = TypeVar("Item")


def is_stale(weight_versions: Sequence[int], current_version: int, tau: int) -> bool:
    """w_current − w_0 > τ, with w_0 the oldest weights the sample was generated under."""
    if not weight_versions:
        raise ValueError("a sample must record at least one weight version")
    return current_version - min(weight_versions) > tau


def refill_group(valid: Sequence[Item], group_size: int) -> list[Item] | None:
    """The group's valid samples repeated up to `group_size`, or None when G/2 or fewer remain."""
    if len(valid) > group_size:
        raise ValueError(f"{len(valid)} valid samples in a group of {group_size}")
    if 2 * len(valid) <= group_size:
        return None
    return [valid[i % len(valid)] for i in range(group_size)]


def rollout_passes(results: Sequence, solved_at: float) -> tuple[int, int]:
    """(passes, samples) of a group's rollouts, for its prompt's pass rate: those the environment scored (stale
    ones included: the policy's attempts all the same), and those of them whose reward is at least `solved_at`."""
    scored = [r.reward for r in results if r.status != "env_error" and r.reward is not None]
    return sum(reward >= solved_at for reward in scored), len(scored)


def trained_reward(result, credit_weight: float) -> float:
    """Success plus `credit_weight` times the task's partial credit (none from a task that does not grade progress,
    nor from an episode cut short): the reward the rollout's advantage comes from."""
    return result.reward + credit_weight * (result.credit or 0.0)
