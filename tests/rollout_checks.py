"""Checks that a stage's rollout record is true: what it says each sample scored and was trained with follows
from what it stores."""

from __future__ import annotations

import json

import pytest
import torch

from rewards import RewardSample, load_reward_module


def check_advantages(rows: list[dict], advantages_of) -> None:
    """Each group's advantages, computed again from its members' stored rewards, are the stored ones."""
    groups: dict[str, dict[str, dict]] = {}
    for row in rows:  # a member's segments share its reward and advantage
        groups.setdefault(row["group_id"], {}).setdefault(row["session_id"], row)
    for members in groups.values():
        rewards = torch.tensor([m["reward"] for m in members.values()], dtype=torch.float64)
        stored = torch.tensor([m["advantage"] for m in members.values()], dtype=torch.float64)
        torch.testing.assert_close(advantages_of(rewards), stored, atol=1e-5, rtol=0)


def check_scores(rows: list[dict], reward_specs, tokenizer) -> None:
    """The recorded reward modules score every stored completion again as they did, and weigh to its reward."""
    given = [recorded_reward_sample(row, tokenizer) for row in rows]
    for index, spec in enumerate(reward_specs):
        module = load_reward_module(spec.path, spec.params)
        assert module(given) == [row["reward_scores"][index]["score"] for row in rows]
    for row in rows:
        weighted = sum(spec.weight * s["score"] for spec, s in zip(reward_specs, row["reward_scores"], strict=True))
        assert row["reward"] == pytest.approx(weighted)


def recorded_reward_sample(row: dict, tokenizer) -> RewardSample:
    given = json.loads(row["reward_input"])
    return RewardSample(tuple(given["prompt"]), tokenizer.decode(row["response_ids"], skip_special_tokens=False),
                        given["reference"], given["metadata"])
