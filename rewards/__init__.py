"""Reward modules: a batch of samples in, one float (or None) per sample out; loaded by dotted path."""

from rewards.loading import RewardModuleError, load_reward_module, reward_module_ref, reward_module_refs, score_batch
from rewards.protocol import RewardModule, RewardSample

__all__ = [
    "RewardModule", "RewardModuleError", "RewardSample", "load_reward_module", "reward_module_ref", "reward_module_refs",
    "score_batch",
]
