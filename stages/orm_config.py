"""What the train_orm stage is configured with: the Prefect form's fields."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from data_contracts import PREFERENCE_V1
from stages.stage_inputs import StageIO


class TrainOrmConfig(StageIO):
    stage_name: ClassVar[str] = "orm"
    dataset_contract: ClassVar = PREFERENCE_V1

    max_steps: int = Field(200, ge=1)
    global_batch_size: int = Field(32, ge=1, description="preference pairs per optimizer step")
    lr: float = Field(3e-4, gt=0)
    warmup_steps: int = Field(10, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2] = 0
    max_seq_len: int = Field(512, ge=16, description="pairs with a longer side are dropped (and counted)")
    eval_every: int = Field(50, ge=1, description="held-out pairwise accuracy every this many steps")
    eval_batch_size: int = Field(64, ge=1)
    checkpoint_every: int = Field(100, ge=1, description="commit resume state every this many steps")
