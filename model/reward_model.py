"""The ORM: a GLM-5 trunk with a scalar head, scoring a conversation at its last token.

Saved as the causal LM's Hugging Face directory (so every loader, engine and lineage check reads the
trunk as it reads any checkpoint) plus `reward_head.safetensors` and `reward_head.json`. The LM head
stays in the directory unused: the trunk remains a valid policy checkpoint to start from.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from model.presets import load_model

HEAD_WEIGHTS = "reward_head.safetensors"
HEAD_CONFIG = "reward_head.json"


class ScalarRewardModel(torch.nn.Module):
    def __init__(self, causal_lm: torch.nn.Module, head: torch.nn.Linear | None = None, seed: int = 0):
        super().__init__()
        self.causal_lm = causal_lm
        if head is None:
            head = torch.nn.Linear(causal_lm.config.hidden_size, 1)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                # Small initial scores: the Bradley–Terry loss starts near log 2 for every pair.
                torch.nn.init.normal_(head.weight, std=0.02 / causal_lm.config.hidden_size ** 0.5)
                torch.nn.init.zeros_(head.bias)
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B] scores, read at each row's last real token (rows are right-padded)."""
        hidden = self.causal_lm.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        last = attention_mask.sum(dim=1) - 1
        return self.head(hidden[torch.arange(input_ids.shape[0]), last]).squeeze(-1).float()

    def save_pretrained(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.causal_lm.save_pretrained(directory)
        save_file({"weight": self.head.weight.detach().contiguous(), "bias": self.head.bias.detach().contiguous()},
                  directory / HEAD_WEIGHTS)
        (directory / HEAD_CONFIG).write_text(json.dumps({"kind": "scalar", "pooling": "last_token"}))


def is_reward_model(directory: str | Path) -> bool:
    return (Path(directory) / HEAD_WEIGHTS).is_file()


def load_reward_model(directory: str | Path) -> ScalarRewardModel:
    directory = Path(directory)
    if not is_reward_model(directory):
        raise FileNotFoundError(f"{directory}: not a reward model checkpoint (no {HEAD_WEIGHTS}); "
                                "train one with the train_orm stage")
    causal_lm = load_model(directory)
    weights = load_file(directory / HEAD_WEIGHTS)
    head = torch.nn.Linear(weights["weight"].shape[1], 1)
    head.load_state_dict(weights)
    return ScalarRewardModel(causal_lm, head)
