"""Which tokens agentic RL trains on: the settings of its importance band, apart from the loss so that a
config (the UI form, a spec) reads them without importing torch."""

from __future__ import annotations

from pydantic import BaseModel, Field

from stages.common.recipe import STRICT


class ImportanceSettings(BaseModel):
    """The band a token's ratio r_t must stay inside to be trained on: (1 − ε_l, 1 + ε_h)."""

    model_config = STRICT
    eps_low: float = Field(0.2, ge=0, description="ε_l: a token whose ratio is at or below 1 − ε_l is not trained on")
    eps_high: float = Field(0.28, ge=0, description="ε_h: nor one at or above 1 + ε_h")
