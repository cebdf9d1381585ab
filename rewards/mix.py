"""SPEC's General RL mix as a reward module: a hard-rule gate, then per-domain weighted normalized scores.

    {"path": "rewards.mix.MixedReward", "params": {
        "gates": [{"path": "rewards.rules.InstructGate"}],
        "domains": {"instruct": [{"path": "rewards.rules.InstructSoft", "weight": 1.0},
                                 {"path": "my_lab.Orm", "weight": 0.5, "scale": "sigmoid"}]}}}

A sample whose hard rule fails gets the minimum, 0, whatever else it scores. Otherwise its domain's
components are normalized to [0, 1] — `scale` [lo, hi] maps that range linearly and clips, "sigmoid"
squashes an unbounded score such as an ORM logit — and averaged with their weights, so the mix is in
[0, 1] too. A sample whose domain has no components, or that one of them cannot score (None, e.g. an
unparsable GRM judgment), is None: counted by the trainer, never given a made-up number. Every
component is called under the same guard as a top-level module, so a failing one is named.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewards.loading import RewardModuleError, check_reward_params, load_reward_module, score_batch
from rewards.protocol import RewardModule, RewardSample

MINIMUM = 0.0


class ComponentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(..., min_length=1)
    weight: float = Field(1.0, gt=0)
    params: dict = Field(default_factory=dict)
    scale: tuple[float, float] | Literal["sigmoid"] = Field((0.0, 1.0), description="[lo, hi] or 'sigmoid'")

    @model_validator(mode="after")
    def _ordered(self):
        if self.scale != "sigmoid" and self.scale[1] <= self.scale[0]:
            raise ValueError(f"{self.path}: scale [lo, hi] needs lo < hi, got {list(self.scale)}")
        return self

    def normalized(self, score: float) -> float:
        if self.scale == "sigmoid":
            return 1.0 / (1.0 + math.exp(-score))
        low, high = self.scale
        return min(max((score - low) / (high - low), 0.0), 1.0)


class MixSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gates: list[ComponentSpec] = Field(default_factory=list)
    domains: dict[str, list[ComponentSpec]] = Field(..., min_length=1)
    timeout_s: float = Field(60.0, gt=0)


@dataclass(frozen=True)
class _Loaded:
    spec: ComponentSpec
    module: RewardModule


class MixedReward:
    """Hard-rule gate, then the per-domain weighted mean of normalized component scores, in [0, 1]."""

    name = "mixed"
    version = "1"

    def __init__(self, domains: dict, gates: list | None = None, timeout_s: float = 60.0):
        spec = MixSpec(domains=domains, gates=gates or [], timeout_s=timeout_s)
        self.timeout_s = spec.timeout_s
        self.gates = [_Loaded(g, load_reward_module(g.path, g.params)) for g in spec.gates]
        self.domains = {domain: [_Loaded(c, load_reward_module(c.path, c.params)) for c in components]
                        for domain, components in spec.domains.items()}

    @staticmethod
    def check_params(domains: dict, gates: list | None = None, timeout_s: float = 60.0) -> None:
        """What __init__ would refuse, found without loading anything: the mix's shape, then each gate's and
        component's path and params (`check_reward_params`)."""
        try:
            spec = MixSpec(domains=domains, gates=gates or [], timeout_s=timeout_s)
        except ValidationError as error:
            first = error.errors()[0]
            raise ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        for where, component in [*(("gates", g) for g in spec.gates),
                                  *((f"domains.{d}", c) for d, cs in spec.domains.items() for c in cs)]:
            try:
                check_reward_params(component.path, component.params)
            except RewardModuleError as error:
                raise ValueError(f"{where}: {error}") from None

    def components(self) -> list[tuple[str, dict, RewardModule]]:
        """(path, params, module) of every gate and component, for lineage."""
        loaded = [*self.gates, *(c for components in self.domains.values() for c in components)]
        return [(item.spec.path, item.spec.params, item.module) for item in loaded]

    def __call__(self, samples: Sequence[RewardSample]) -> list[float | None]:
        gated = [False] * len(samples)
        for gate in self.gates:
            for index, score in enumerate(score_batch(gate.module, samples, self.timeout_s)):
                gated[index] |= score is not None and score < 1.0
        mixed: list[float | None] = [None] * len(samples)
        for domain, components in self.domains.items():
            indices = [i for i, s in enumerate(samples) if s.metadata.get("domain") == domain]
            if not indices:
                continue
            batch = [samples[i] for i in indices]
            scores = [score_batch(c.module, batch, self.timeout_s) for c in components]
            total_weight = sum(c.spec.weight for c in components)
            for position, index in enumerate(indices):
                if gated[index]:
                    mixed[index] = MINIMUM
                    continue
                values = [column[position] for column in scores]
                if any(value is None for value in values):
                    continue
                mixed[index] = sum(c.spec.weight * c.spec.normalized(v) for c, v in zip(components, values, strict=True)) / total_weight
        return mixed
