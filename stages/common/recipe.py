"""What every stage recipe shares: strict validation, the stage's defaults for partial nested settings,
and a warm-up that fits in the steps. A recipe sets `model_config = STRICT` and assigns the two checks
in its class body (`_stage_defaults = STAGE_DEFAULTS`), where pydantic collects them."""

from __future__ import annotations

from dataclasses import is_dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import to_jsonable_python

# Every stage config and settings model: unknown fields and non-finite numbers (NaN, ±Infinity, and
# JSON's 1e999) are refused with the field's name, before any job starts.
STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)

# A seed every generator takes as given: numpy's refuses one of 2**32 or more, and a negative one.
Seed = Annotated[int, Field(ge=0, lt=2**32)]


def fill_stage_defaults(recipe: type[BaseModel], data):
    """A partial nested settings value keeps the stage's defaults for what it leaves out: on SFT,
    `optimizer={"warmup_steps": 2}` keeps SFT's lr, not OptimizerSettings' own (STAGE_DEFAULTS)."""
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    for name, field in recipe.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if isinstance(filled.get(name), dict) and (isinstance(default, BaseModel) or is_dataclass(default)):
            if filled[name].get("kind", getattr(default, "kind", None)) != getattr(default, "kind", None):
                continue  # a value of another kind (a Slurm launch for a local default) is whole
            filled[name] = {**to_jsonable_python(default), **filled[name]}
    return filled


def check_warmup(recipe):
    """A recipe's warm-up fits in its steps (an lr that never reaches its peak is a typo, not a plan)."""
    if recipe.optimizer.warmup_steps > recipe.max_steps:
        raise ValueError(f"optimizer.warmup_steps {recipe.optimizer.warmup_steps} exceeds max_steps {recipe.max_steps}")
    return recipe


def nested(default: BaseModel, description: str | None = None):
    """A field holding a settings model, with its default; the UI's form describes it by `description`, else by
    the first sentence of the settings class's docstring."""
    sentence = " ".join((type(default).__doc__ or "").split()).split(". ")[0].rstrip(".")
    return Field(default, description=description or sentence)


STAGE_DEFAULTS = model_validator(mode="before")(classmethod(fill_stage_defaults))
WARMUP_WITHIN_STEPS = model_validator(mode="after")(check_warmup)
