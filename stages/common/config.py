"""The parts every stage config is composed of: where it reads and writes (StageIO), and the shared
settings sub-models each stage nests (optimizer, sampling, held-out evaluation).

A stage config is `class XConfig(XRecipe, StageIO)`: StageIO's fields (first in a form and in run.json)
are filled by whoever launches the stage (the pipeline, a form, a run.json), the recipe's are what a
person or a preset tunes. Both are flat pydantic models; nothing inherits further.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, WithJsonSchema, model_validator
from pydantic.json_schema import SkipJsonSchema

from data_contracts import CHAT_V1
from data_contracts.contract import Contract
from infra.launchers import LaunchSettings, LocalLaunch
from infra.store import StoreRoot
from model.precision import Precision
from rollout.protocol import SamplingParams
from stages.common.recipe import STRICT, Seed, nested


class Provenance(BaseModel):
    """Who and what launched the job; goes into lineage verbatim."""

    model_config = STRICT
    flow_run_id: str | None = None
    deployment_id: str | None = None
    flow_name: str | None = None
    triggered_by: str | None = None
    wandb_run: str | None = None


class StageIO(BaseModel):
    """The fields every training stage's config has: where it reads, where it writes, how it is seeded."""

    model_config = STRICT

    run_id: str = Field("", pattern=r"^([A-Za-z0-9._=+@-]+)?$",
                        description="Names the run's artifacts; left empty, a fresh STAGE-TIME-XXXX.")
    store: StoreRoot | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    init_checkpoint: str = Field(..., description="The committed checkpoint to start from: STAGE:latest (e.g. "
                                                  "sft:latest), a name inside the store, or a URI.")
    datasets: list[str] = Field(..., min_length=1, description="Committed datasets (train/test splits): NAME:latest "
                                                               "(e.g. arith:latest), names inside the store, or URIs.")
    output_name: str = Field("", description="Artifact name of the final checkpoint; default checkpoints/STAGE/RUN_ID.")
    seed: Seed = Field(0, description="seeds data order, sampling and initialisation: the same seed, the same run")
    launch: LaunchSettings = Field(default_factory=LocalLaunch, description=(
        "Where the job runs: this machine, a Slurm cluster, several hosts through DeepSpeed's launcher, or "
        "Kubernetes. The trainer and its results are the same everywhere."))
    # Filled in by the flow that runs the stage (lineage's links to Prefect and wandb), never by a person:
    # kept out of the JSON Schema, so out of the UI's form.
    provenance: SkipJsonSchema[Provenance] = Field(default_factory=Provenance)

    # The folder under checkpoints/ a stage's outputs go to by default.
    stage_name: ClassVar[str] = "stage"
    # The module that runs the stage's job: `python -m <entry_module> --config run.json`.
    entry_module: ClassVar[str] = ""
    # What every dataset in `datasets` must be: conversations (chat@1), or RL prompts (prompt@1).
    dataset_contract: ClassVar[Contract] = CHAT_V1

    @model_validator(mode="after")
    def _default_names(self):
        if not self.run_id:  # a form left empty: a fresh id, never one an earlier run used
            self.run_id = f"{self.stage_name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
        if not self.output_name:
            self.output_name = f"checkpoints/{self.stage_name}/{self.run_id}"
        return self

    @classmethod
    def accepts_contract(cls, contract_id: str | None) -> bool:
        """Whether a dataset published under `contract_id` is one this stage reads."""
        return contract_id == cls.dataset_contract.id

    @classmethod
    def suite_contract(cls, suite: str) -> Contract:
        """The contract an embedded suite named in `datasets` is published as for this stage."""
        return cls.dataset_contract

    @property
    def resume_prefix(self) -> str:
        return f"{self.output_name}-steps/"


# A choice of "0" to "3" in forms and JSON (Prefect's form shows an integer choice of 0 as blank);
# the integer in Python, and an integer from a spec or a script is taken as well.
ZeroStage = Annotated[Literal[0, 1, 2, 3], BeforeValidator(lambda v: int(v) if v in ("0", "1", "2", "3") else v),
                      PlainSerializer(str, when_used="json"),
                      WithJsonSchema({"type": "string", "enum": ["0", "1", "2", "3"], "title": "Zero Stage"})]


class OptimizerSettings(BaseModel):
    """AdamW (betas 0.9, 0.95) under DeepSpeed: the peak learning rate, its linear warm-up, clipping, ZeRO."""

    model_config = STRICT
    lr: float = Field(5e-5, gt=0, le=1, description="peak learning rate (above 1 AdamW only diverges)")
    warmup_steps: int = Field(5, ge=0, description="linear warm-up, in optimizer steps (at most max_steps)")
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW's decoupled weight decay")
    grad_clip: float = Field(1.0, gt=0, description="gradient norm clipping")
    nonfinite_skips: int = Field(0, ge=0, description="steps with a non-finite loss skipped (no update) before "
                                                      "the stage stops with an error; 0 stops at the first")
    zero_stage: ZeroStage = Field(0, description="DeepSpeed ZeRO: 0 off, 1 optimizer states, 2 and gradients, "
                                                "3 and parameters, sharded across ranks",
                                  json_schema_extra={"default": "0"})


# What LoRA adapts by default: GLM-5's attention projections (MLA) and the MLP projections. peft maps the
# MLP names onto the routed experts' fused 3-D parameters (the dense first layer's and the shared experts'
# MLPs then stay as they are); the DSA indexer stays as SFT trained it (frozen in RL).
LORA_TARGETS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(BaseModel):
    """Low-rank adapters (the peft library) instead of training every weight; checkpoints and weight
    pushes hold the merged weights, so plain transformers and the engines load them as any other."""

    model_config = STRICT
    rank: int = Field(0, ge=0, description="adapter rank; 0 trains every weight (no LoRA)")
    alpha: float = Field(16.0, gt=0, description="scaling: the adapter's update is alpha / rank · B A")
    targets: list[str] = Field(list(LORA_TARGETS), min_length=1, description="names of the layers adapted")


class ComputeSettings(BaseModel):
    """How a step is computed: the numeric precision, how much of the batch is in memory at once, and
    what is traded for memory. The defaults suit any machine: the precision follows the device."""

    model_config = STRICT
    precision: Precision = Field(
        "auto", description="bf16: DeepSpeed's bf16 mode (fp32 master weights and optimizer state; logprobs and "
                            "losses in fp32); auto: bf16 on a GPU, fp32 on a CPU")
    micro_batch_size: int | None = Field(
        None, ge=1, description="sequences per rank per forward pass; the rest of the rank's share accumulates "
                                "gradients (global batch = micro × accumulation × ranks); default: the whole share")
    activation_checkpointing: bool = Field(False, description="recompute each layer's activations in backward")
    experts_kernel: Literal["auto", "eager", "batched_mm", "grouped_mm"] = Field(
        "auto", description="how the MoE experts compute (transformers' implementations: a loop over the experts, "
                            "one batched matmul, torch's grouped matmul); auto: the fastest bench/moe_experts.py "
                            "measured on the device")
    offload_optimizer: bool = Field(False, description="keep optimizer state in CPU memory (ZeRO stage 1 or more)")
    lora: LoraSettings = nested(LoraSettings())


class RouterBalancing(BaseModel):
    """Auxiliary-loss-free MoE load balancing (DeepSeek-V3's, as GLM-5 trains): after each optimizer step every
    expert's router bias moves by `rate` toward its layer's mean load (model/moe_balance.py). Expert load is
    measured and recorded either way."""

    model_config = STRICT
    enabled: bool = Field(True, description="update the routers' biases after each step")
    rate: float = Field(1e-3, gt=0, le=1, description="γ, the bias step per optimizer step (DeepSeek-V3: 0.001)")


class MtpSettings(BaseModel):
    """GLM-5's multi-token prediction layer, where the checkpoint carries one (model/mtp.py): trained on the stage's
    samples with its own loss (one layer applied at depths 1..`depths`), or frozen. It trains on the model's hidden
    states detached: its loss moves no weight of the model's own."""

    model_config = STRICT
    train: bool | None = Field(None, description=(
        "train the MTP layer on this stage's samples; false: frozen, saved as loaded; default: trained, except under "
        "ZeRO-3 (which partitions it outside the model's forward), where it stays frozen"))
    depths: int = Field(3, ge=1, le=8, description="depths its one layer is trained at (GLM-5: 3)")
    loss_weight: float = Field(0.3, gt=0, le=10, description="its loss's weight beside the stage's own")


class SamplingSettings(BaseModel):
    """How the policy samples its training responses."""

    model_config = STRICT
    temperature: float = Field(1.0, ge=0.01, le=10, description="the trainer divides logits by it: at least 0.01")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: the smallest set of tokens holding this much probability")
    max_new_tokens: int = Field(64, ge=1, description="per response (per turn in agent episodes)")

    def params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens)


class DynamicSamplingSettings(BaseModel):
    """DAPO's dynamic sampling: a group whose rewards are all equal has advantage 0 for every sample, so it
    trains nothing and only dilutes the step; such groups are not trained on."""

    model_config = STRICT
    enabled: bool = Field(True, description="train only on groups whose rewards differ, drawing more prompts "
                                            "until the step's groups are full; off: train on the groups as drawn")
    max_draws: int = Field(4, ge=1, description="draws of prompts per step at most; then the step trains on the "
                                                "groups with signal it has (its record says how many)")


class PassRateBand(BaseModel):
    """The open interval of running pass rates a prompt is drawn normally inside: a rate equal to `low` or
    `high` is outside it. The default, above 0 and below 1, is a prompt the policy sometimes solves."""

    model_config = STRICT
    low: float = Field(0.0, ge=0, le=1, description="a prompt solved this often or less is drawn less")
    high: float = Field(1.0, ge=0, le=1, description="a prompt solved this often or more is drawn less")

    @model_validator(mode="after")
    def _low_below_high(self):
        if self.low >= self.high:
            raise ValueError(f"band.low {self.low} must be below band.high {self.high}")
        return self


class DifficultySettings(BaseModel):
    """Online difficulty: each prompt's running pass rate, from every group drawn of it (trained on or not),
    and prompts the policy always or never solves drawn less, so the draws that dynamic sampling would
    throw away are spent on prompts with signal (stages/common/difficulty.py)."""

    model_config = STRICT
    enabled: bool = Field(False, description="draw prompts by their running pass rate; off: every prompt alike")
    band: PassRateBand = Field(PassRateBand(), description="the pass rates of prompts drawn normally (an open "
                                                           "interval: the default is 'sometimes solved')")
    solved_at: float = Field(1.0, description="a sample passes when its total reward (the rewards' weighted sum) "
                                              "is at least this")
    outside_weight: float = Field(0.1, gt=0, le=1, description="the draw weight of a prompt whose pass rate is "
                                                              "outside the band, against 1 inside; above 0, so it "
                                                              "comes back and is measured again as the policy changes")
    min_samples: int | None = Field(None, ge=1, description="samples of a prompt seen before its pass rate counts; "
                                                            "until then it is drawn normally (default: one group)")
    # A decay per group of the prompt rather than per step: a prompt drawn rarely keeps its estimate between
    # draws instead of fading to nothing, and each new group still outweighs what older policies did.
    decay: float = Field(0.5, ge=0, lt=1, description="the share of a prompt's earlier evidence kept at each new "
                                                      "group of it: 0 rates it by its latest group alone")


class RolloutRecordSettings(BaseModel):
    """The trained samples on record (rollout@1 Parquet, one shard per step, committed as the stage runs,
    listed in the checkpoint's lineage), and a few of them shown while it trains."""

    model_config = STRICT
    sample_rate: float = Field(1.0, ge=0, le=1, description="share of each step's groups recorded, whole groups "
                                                            "chosen by group id (0: none)")
    show_every: int = Field(5, ge=0, description="after the first step and every this many, decoded samples go to "
                                                 "the run's log and a table in the UI (0: never)")
    show_samples: int = Field(3, ge=1, description="how many samples each table shows")


class HeldoutSettings(BaseModel):
    """The trainer's own held-out metric, computed on the test split while training."""

    model_config = STRICT
    every: int = Field(100, ge=1, description="every this many steps, and after the last")
    samples: int | None = Field(None, ge=1, description="the first this many held-out samples; default all")
    batch_size: int | None = Field(None, ge=1, description="default: the training batch size")


def per_rank(count: int, world_size: int, field: str) -> int:
    """`count` split evenly over the ranks, or a ValueError naming the config field that does not split."""
    if count % world_size:
        raise ValueError(f"{field} {count} does not split over {world_size} ranks")
    return count // world_size
