"""Where a stage's rollout engines come from: the nested `engines` setting of every stage that samples,
apart from the code that starts them (rollout/engines.py) so that reading a config imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.precision import Precision

WeightSync = Literal["distributed", "disk"]


class EngineSettings(BaseModel):
    """The stage's rollout engines: started here (replicas, precision, threads) or running ones (engine_urls,
    router_url), and how the trainer's weights reach them (weight_sync)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    backend: Literal["builtin", "sglang"] = Field("builtin", description=(
        "what serves the engines started here: builtin (our engine, SGLang's /generate contract, any device) or "
        "sglang (SGLang's own server, `pip install .[sglang]`, CUDA GPUs only)"))
    tp_size: int = Field(1, ge=1, description="backend sglang: GPUs each replica shards the model over (--tp-size)")
    dp_size: int = Field(1, ge=1, description="backend sglang: data-parallel copies inside each replica (--dp-size)")
    mem_fraction_static: float | None = Field(None, gt=0, lt=1, description=(
        "backend sglang: the share of GPU memory for weights and KV cache (--mem-fraction-static); "
        "default: SGLang's choice"))
    deterministic: bool = Field(True, description=(
        "backend sglang: batch-invariant kernels, so a sample does not depend on what it was batched with "
        "(--enable-deterministic-inference; slower)"))
    replicas: int = Field(1, ge=1, description="engines started here (per trainer rank) when engine_urls and router_url "
                                               "are empty; more than one go behind SGLang's router")
    engine_urls: list[str] = Field(default_factory=list, description=(
        "running engines (ours or SGLang) instead of starting any; more than one go behind a router started here"))
    router_url: str | None = Field(None, description="SGLang's router in front of running engines (at scale)")
    weight_sync: WeightSync = Field("distributed", description=(
        "how a trainer's weights reach its engines after each step: distributed (SGLang's "
        "update_weights_from_distributed: a gloo/NCCL broadcast, nothing written) or disk (a Hugging Face directory "
        "each engine loads: for engines that cannot join a group)"))
    precision: Precision | None = Field(None, description="the dtype engines started here serve; default: the "
                                                          "trainer's compute precision (auto where nothing trains)")
    speculative_steps: int = Field(0, ge=0, le=8, description=(
        "speculative decoding: draft tokens per step from the checkpoint's MTP layer, verified by the model at once "
        "(greedy output the model's own, sampled output distributed as without it); 0: off. backend sglang: its "
        "EAGLE/MTP options (--speculative-algorithm EAGLE, --speculative-num-steps)"))
    speculative_max_rows: int | None = Field(None, ge=1, description=(
        "speculate only while at most this many rows of a batch decode (the batch's tail), decoding plainly above: "
        "a verification forward over several tokens per row costs little more than a plain step only while the "
        "device is not already busy with the batch's rows; None: at every batch size. backend sglang: "
        "--speculative-adaptive with this batch size as its tier boundary"))
    threads: int | None = Field(None, ge=1, description="CPU threads per engine started here; default: the cores "
                                                        "shared out among the processes computing at once")

    @model_validator(mode="after")
    def _one_source(self):
        if self.router_url and self.engine_urls:
            raise ValueError("engines: give router_url or engine_urls, not both")
        if self.speculative_max_rows is not None and not self.speculative_steps:
            raise ValueError("engines.speculative_max_rows bounds speculative decoding, which is off: set "
                             "engines.speculative_steps too")
        if self.backend == "builtin":
            sglang_only = [name for name in ("tp_size", "dp_size", "mem_fraction_static")
                           if name in self.model_fields_set and getattr(self, name) not in (None, 1)]
            if sglang_only:
                raise ValueError(f"engines.{sglang_only[0]} is a setting of backend sglang; engines.backend is builtin")
        return self

    def decoding(self) -> dict[str, int | None]:
        """How engines started for these settings decode (what an engine pool matches a lease on)."""
        return {"speculative_steps": self.speculative_steps, "speculative_max_rows": self.speculative_max_rows}

    @property
    def running(self) -> bool:
        """Engines someone else started (and the trainer's ranks share), not ones this stage starts."""
        return bool(self.router_url or self.engine_urls)
