"""Field types the launchers share."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _variables(environment: dict[str, str]) -> dict[str, str]:
    # Each ends up in a shell line (an sbatch script, .deepspeed_env): a name and one line of value.
    for name, value in environment.items():
        if not ENV_NAME.fullmatch(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"{name!r}: a variable name ([A-Za-z_][A-Za-z0-9_]*) with a one-line value")
    return environment


Environment = Annotated[dict[str, str], AfterValidator(_variables)]
