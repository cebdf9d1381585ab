"""The settings of GRPO's IcePop objective, apart from the loss so that a config (the UI form, a spec)
reads them without importing torch."""

from __future__ import annotations

from pydantic import BaseModel, Field

from stages.common.recipe import STRICT


class IcePopSettings(BaseModel):
    """The Eq. 1 objective's trust region (SPEC): IcePop's band on π_train/π_infer and the PPO clip."""

    model_config = STRICT
    beta: float = Field(2.0, gt=1, description="IcePop band: 1/β ≤ π_train/π_infer ≤ β")
    eps_low: float = Field(0.2, ge=0, description="PPO clip below: the ratio is clipped at 1 − eps_low")
    eps_high: float = Field(0.28, ge=0, description="PPO clip above (clip-higher): at 1 + eps_high")
