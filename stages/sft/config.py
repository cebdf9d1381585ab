"""The SFT stage's one config object: the Prefect form, the CLI flags and the run.json the job reads."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, Field, WithJsonSchema, model_validator

from stages.common.config import (
    ComputeSettings,
    HeldoutSettings,
    MtpSettings,
    OptimizerSettings,
    RouterBalancing,
    StageIO,
)
from stages.common.recipe import STAGE_DEFAULTS, STRICT, WARMUP_WITHIN_STEPS, nested

ThinkingMode = Literal["interleaved", "preserved", "off"]
# A share per thinking mode; a form shows one number field per mode (a mode left out gets no share).
ThinkingMix = Annotated[dict[ThinkingMode, Annotated[float, Field(ge=0, le=1)]], WithJsonSchema({
    "type": "object", "additionalProperties": False,
    "properties": {mode: {"type": "number", "minimum": 0, "maximum": 1, "title": mode.title()}
                   for mode in get_args(ThinkingMode)}})]


class DsaSchedule(BaseModel):
    """GLM-5's DSA training, in three phases by optimizer step.

    1. dense: DSA not yet switched on: the model trains alone with dense (SDPA) attention and the
       indexer is not run, as GLM-5's model was trained before its DSA adaptation.
    2. indexer warm-up: the main model's learning rate is 0 — only the indexer learns
       KL(dense attention ‖ softmax(I)) on detached inputs.
    3. sparse: attention restricted to the indexer's top-k; indexer loss restricted to the selected keys.
    """

    model_config = STRICT
    dense_steps: int = Field(200, ge=0, description="steps of dense attention before DSA is switched on")
    indexer_warmup_steps: int = Field(40, ge=0, description="then steps training the indexer alone on its KL loss")
    indexer_lr: float = Field(3e-3, gt=0, le=1, description="the indexer's learning rate in its warm-up")
    indexer_loss_weight: float = Field(1.0, ge=0, description="the indexer's KL loss weight beside the LM loss")


class SftRecipe(BaseModel):
    """What a person or a preset tunes in SFT."""

    model_config = STRICT
    thinking_mix: ThinkingMix = Field(
        {"interleaved": 0.6, "preserved": 0.2, "off": 0.2},
        description="the share of training conversations rendered in each thinking mode (sums to 1)")
    max_seq_len: int = Field(512, ge=16, description="tokens per sample; longer samples are dropped (and counted)")
    global_batch_size: int = Field(32, ge=1, description="samples per optimizer step over every rank")
    max_steps: int = Field(600, ge=1, description="optimizer steps")
    optimizer: OptimizerSettings = nested(OptimizerSettings(lr=3e-3, warmup_steps=30))
    compute: ComputeSettings = nested(ComputeSettings())
    router_balancing: RouterBalancing = nested(RouterBalancing())
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decay to this share of the peak lr")
    heldout: HeldoutSettings = Field(HeldoutSettings(every=100, samples=128), description="held-out loss while training")
    checkpoint_every: int = Field(100, ge=1, description="Commit resume state every this many steps.")
    dsa: DsaSchedule = nested(DsaSchedule())
    mtp: MtpSettings = nested(MtpSettings())

    _stage_defaults = STAGE_DEFAULTS
    _warmup_within_steps = WARMUP_WITHIN_STEPS

    @model_validator(mode="after")
    def _check(self):
        if abs(sum(self.thinking_mix.values()) - 1.0) > 1e-6:
            raise ValueError(f"thinking_mix must sum to 1, got {sum(self.thinking_mix.values())}")
        return self


class SftConfig(SftRecipe, StageIO):
    """The SFT stage's one config object: the Prefect form, the CLI flags and the run.json the job reads."""

    stage_name: ClassVar[str] = "sft"
    entry_module: ClassVar[str] = "stages.sft.train"
