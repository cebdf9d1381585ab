"""The outcome reward model (ORM) as a reward module: a train_orm checkpoint's scalar score of each reply.

Scores are the head's raw logits (unbounded; the General RL mix normalizes them with `scale:
"sigmoid"`). Replies are scored batched, in length order to keep padding small, with the same
rendering the ORM was trained on (`model.reward_inputs.reply_ids`). A sample whose rendering exceeds
`max_len` is None: the ORM never saw such lengths.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from infra.store import open_artifact, open_store
from model.device import inference_device
from model.dsa import set_dense_attention
from model.reward_inputs import collate_replies, reply_ids
from model.reward_model import load_reward_model
from model.tokenizer import load_tokenizer
from rewards.protocol import RewardSample
from rewards.replies import visible_reply


class OrmScore:
    name = "orm"
    version = "1"

    def __init__(self, checkpoint: str, store: str | None = None, batch_size: int = 32, max_len: int = 512):
        """`checkpoint`: the ORM's full URI, or its name in `store` (default $POSTTRAIN_STORE or ./artifacts).
        A full URI is opened where it points: a reward config recorded in a checkpoint's lineage then
        scores the same from any working directory or store."""
        artifact = open_artifact(checkpoint) if "://" in checkpoint else open_store(store).open(checkpoint)
        with tempfile.TemporaryDirectory(prefix="posttrain-orm-") as tmp:
            local = artifact.download(Path(tmp) / "orm")
            self.model = load_reward_model(local).to(inference_device()).eval()
            self.tokenizer = load_tokenizer(local)
        set_dense_attention(self.model, dense=False)  # GLM-5's sparse attention, as the ORM trained with it
        self.batch_size, self.max_len = batch_size, max_len

    @torch.no_grad()
    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        ids = [reply_ids(self.tokenizer, sample.prompt, visible_reply(sample)) for sample in samples]
        scores: list[float | None] = [None] * len(samples)
        scorable = sorted((i for i, sample_ids in enumerate(ids) if len(sample_ids) <= self.max_len),
                          key=lambda i: len(ids[i]))
        for start in range(0, len(scorable), self.batch_size):
            chunk = scorable[start:start + self.batch_size]
            batch = collate_replies([ids[i] for i in chunk], self.tokenizer.pad_token_id)
            values = self.model(*(tensor.to(self.model.head.weight.device) for tensor in batch))
            for index, value in zip(chunk, values.tolist(), strict=True):
                scores[index] = value
        return scores
