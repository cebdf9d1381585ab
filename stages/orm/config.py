"""What the ORM stage is configured with: the Prefect form's fields."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field, model_validator

from data_contracts import PREFERENCE_V1
from stages.common.config import ComputeSettings, HeldoutSettings, OptimizerSettings, StageIO
from stages.common.recipe import STAGE_DEFAULTS, STRICT, WARMUP_WITHIN_STEPS, nested


class OrmRecipe(BaseModel):
    """What a person or a preset tunes in ORM training."""

    model_config = STRICT
    max_steps: int = Field(200, ge=1, description="optimizer steps")
    global_batch_size: int = Field(32, ge=1, description="preference pairs per optimizer step")
    optimizer: OptimizerSettings = nested(OptimizerSettings(lr=3e-4, warmup_steps=10))
    compute: ComputeSettings = nested(ComputeSettings())
    max_seq_len: int = Field(512, ge=16, description="pairs with a longer side are dropped (and counted)")
    heldout: HeldoutSettings = Field(HeldoutSettings(every=50, batch_size=64),
                                     description="held-out pairwise accuracy while training")
    checkpoint_every: int = Field(100, ge=1, description="commit resume state every this many steps")

    _stage_defaults = STAGE_DEFAULTS
    _warmup_within_steps = WARMUP_WITHIN_STEPS

    @model_validator(mode="after")
    def _no_lora(self):
        if self.compute.lora.rank:  # the scalar head and the trunk train together; adapters would freeze the head
            raise ValueError("compute.lora: the ORM trains every weight (set lora.rank to 0)")
        return self


class TrainOrmConfig(OrmRecipe, StageIO):
    stage_name: ClassVar[str] = "orm"
    entry_module: ClassVar[str] = "stages.orm.train"
    dataset_contract: ClassVar = PREFERENCE_V1
