"""What the difficulty filter keeps: K answers sampled per prompt, the band of pass rates kept, and the reward
that says whether an answer passes. The settings of `posttrain data filter` and of a stage's `difficulty_filter`
in a pipeline spec; reading them imports no model code (a spec is read on every command)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from rewards.loading import RewardModuleError, resolve_reward_target
from stages.common.recipe import STRICT

# Exact match of the stated answer ("The answer is X."), case and surrounding space aside: it scores chat@1
# rows whose reply states an answer and prompt@1 rows with a reference answer alike.
DEFAULT_REWARD = "rewards.verifiers.AnswerMatch"
BAND_SEPARATOR = ".."


def parse_band(value) -> tuple[float, float]:
    """(LOW, HIGH) of "LOW..HIGH" or [LOW, HIGH]: two pass rates in [0, 1], LOW not above HIGH."""
    if isinstance(value, str):
        low_text, separator, high_text = value.partition(BAND_SEPARATOR)
        if not separator:
            raise ValueError(f"{value!r}: give LOW{BAND_SEPARATOR}HIGH, e.g. 0.1{BAND_SEPARATOR}0.9")
        try:
            low, high = float(low_text), float(high_text)
        except ValueError:
            raise ValueError(f"{value!r}: LOW and HIGH must be numbers (LOW{BAND_SEPARATOR}HIGH, e.g. "
                             f"0.1{BAND_SEPARATOR}0.9)") from None
    elif isinstance(value, list | tuple) and len(value) == 2 \
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        low, high = float(value[0]), float(value[1])
    else:
        raise ValueError(f"{value!r}: give LOW{BAND_SEPARATOR}HIGH or [LOW, HIGH]")
    if not all(math.isfinite(v) and 0 <= v <= 1 for v in (low, high)):
        raise ValueError(f"{value!r}: pass rates lie between 0 and 1")
    if low > high:
        raise ValueError(f"{value!r}: LOW {low:g} is above HIGH {high:g}")
    return low, high


PassRateBand = Annotated[tuple[float, float], BeforeValidator(parse_band)]


class DifficultyFilterSettings(BaseModel):
    """GLM-5's difficulty filter: keep the prompts the model sometimes fails. Each prompt of a dataset's train
    split is answered `samples` times; an answer passes when `reward` scores it at least `pass_threshold`; the
    prompts whose share of passing answers lies in `pass_rate` (both ends included) are kept."""

    model_config = STRICT
    samples: int = Field(..., ge=1, description="K: answers sampled per prompt")
    pass_rate: PassRateBand = Field(..., description=(
        "LOW..HIGH or [LOW, HIGH]: keep the prompts whose share of passing answers lies in this band, both ends "
        "included (0.1..0.9: neither always nor never solved)"))
    reward: str = Field(DEFAULT_REWARD, min_length=1, description="the reward module that scores each answer, by "
                                                                  "dotted path")
    reward_params: dict = Field(default_factory=dict, description="its parameters")
    pass_threshold: float = Field(1.0, description="an answer passes when its reward is at least this")
    batch_prompts: int = Field(64, ge=1, description="prompts per request to the engine, each asked `samples` times")

    @field_validator("reward")
    @classmethod
    def _a_reward_module(cls, path: str) -> str:
        """Refused as the settings are read, naming the path, before any engine starts."""
        try:
            resolve_reward_target(path)
        except RewardModuleError as error:
            raise ValueError(str(error)) from None
        return path

    def band(self) -> str:
        low, high = self.pass_rate
        return f"{low:g}{BAND_SEPARATOR}{high:g}"

    def keeps(self, rate: float) -> bool:
        low, high = self.pass_rate
        return low <= rate <= high
