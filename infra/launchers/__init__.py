"""Where a stage job runs: the `launch` section of every stage config, one model per launcher.

Each model is the launcher itself (its fields are the form's, its `start` implements
infra.launch.Launcher), chosen by `kind`: `local` (this machine), `slurm`, `deepspeed` (DeepSpeed's
multi-node launcher over ssh), `kubernetes`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from infra.launchers.deepspeed import DeepSpeedLaunch
from infra.launchers.kubernetes import KubernetesLaunch
from infra.launchers.local import LocalLaunch
from infra.launchers.slurm import SlurmLaunch


def _as_any_of(schema: dict) -> None:
    # Prefect's form offers a choice between the schemas of an anyOf; it does not read oneOf, which is
    # what pydantic writes for a discriminated union. Each launcher's `kind` is a constant, so at most
    # one of them matches a value either way.
    schema["anyOf"] = schema.pop("oneOf")
    schema.pop("discriminator", None)


LaunchSettings = Annotated[LocalLaunch | SlurmLaunch | DeepSpeedLaunch | KubernetesLaunch,
                           Field(discriminator="kind", json_schema_extra=_as_any_of)]

__all__ = ["DeepSpeedLaunch", "KubernetesLaunch", "LaunchSettings", "LocalLaunch", "SlurmLaunch"]
