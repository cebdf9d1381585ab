"""SGLang's native /generate contract (`sglang.api.v1.api_types`), as far as a token-in engine serves it.

Requests and responses have SGLang's shapes: `input_ids` (one prompt or a batch), `sampling_params` (one
for all prompts or one per prompt), `return_logprob` and `logprob_start_len` (likewise), `meta_info` with
`[logprob, token_id, text]` entries and `finish_reason` objects. So our engine is a worker SGLang's router
can front, and our clients talk to real SGLang servers; tests/test_sglang_contract.py validates both
directions against SGLang's own types.

As SGLang does, unknown top-level fields are ignored (its router adds several) and unknown sampling
parameters are refused (a misspelt one would otherwise change nothing, silently). A field this engine
cannot honour (text prompts, streaming, top logprobs, hidden states, string stops, grammars) is refused
with a 400 naming it, never ignored.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# As SGLang does: a temperature this small samples greedily (dividing logits by it would overflow).
GREEDY_BELOW = 1e-6
# The response header naming the engine that answered: SGLang's router passes it through, so a client
# behind the router knows which replica served each turn of a rollout.
ENGINE_HEADER = "X-Posttrain-Engine"
# SGLang's "no top-k" (sglang.api.v1.SamplingParams.top_k's default); -1 means the same.
NO_TOP_K = 1 << 30

# The lists of a request are refused at their first bad item: pydantic builds each item's error holding the
# GIL, and naming all of a million bad ids held the engine's event loop (its /health) for a second.
_FIRST_BAD_ITEM = Field(fail_fast=True)
Ints = Annotated[list[int], _FIRST_BAD_ITEM]
Strs = Annotated[list[str], _FIRST_BAD_ITEM]
Bools = Annotated[list[bool], _FIRST_BAD_ITEM]
IntLists = Annotated[list[Ints], _FIRST_BAD_ITEM]


class SamplingParams(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    temperature: float = Field(1.0, ge=0.0, description=f"0 (or below {GREEDY_BELOW:g}) is greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(NO_TOP_K, description="keep the k likeliest tokens; -1 or 2^30: all")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="drop tokens below min_p times the likeliest one's probability")
    max_new_tokens: int = Field(128, ge=0)
    stop_token_ids: Ints = Field(default_factory=list)
    ignore_eos: bool = False
    sampling_seed: int | None = Field(None, description="seeds this request's sampling; default: engine seed and request count")
    # SGLang's detokenizer options: a token-out engine has no text to shape, so any value is served alike.
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stream_interval: int | None = None
    # SGLang's options this engine does not implement: only their "off" value is accepted.
    stop: str | Strs | None = None
    stop_regex: str | Strs | None = None
    min_new_tokens: int = 0
    n: int = 1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    # Any non-empty logit_bias is refused (below): its entries left unchecked, as a million bad ones each named
    # held the event loop for a second.
    logit_bias: dict = Field(default_factory=dict)
    custom_params: dict | None = None
    beam_width: int | None = None
    watermark: dict | None = None
    choice: Strs = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _known(cls, given):
        # Unknown parameters are refused in one error: pydantic's extra="forbid" builds one per key holding the
        # GIL, and 262,144 of them held the engine's event loop (its /health) for a second.
        unknown = [name for name in given if name not in cls.model_fields] if isinstance(given, dict) else []
        if unknown:
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise ValueError(f"{', '.join(unknown[:3])}{more}: not "
                             f"{'a sampling parameter' if len(unknown) == 1 else 'sampling parameters'}")
        return given

    @model_validator(mode="after")
    def _served(self) -> SamplingParams:
        if not (self.top_k == -1 or self.top_k >= 1):
            raise ValueError(f"top_k: {self.top_k}; give -1 (all tokens) or at least 1")
        off = {"stop": None, "stop_regex": None, "min_new_tokens": 0, "n": 1, "frequency_penalty": 0.0,
               "presence_penalty": 0.0, "repetition_penalty": 1.0, "json_schema": None, "regex": None, "ebnf": None,
               "structural_tag": None, "logit_bias": {}, "custom_params": None, "beam_width": None,
               "watermark": None, "choice": []}
        unserved = [name for name, value in off.items() if getattr(self, name) not in (value, [])]
        if unserved:
            raise ValueError(f"{', '.join(unserved)}: not served by this engine (token ids in, token ids out; "
                             f"use stop_token_ids for stops)")
        return self

    def keeps_all_tokens(self) -> bool:
        return self.top_k == -1 or self.top_k >= NO_TOP_K


@dataclass(frozen=True)
class UniformBatch:
    """Prompts the engine decodes together: one set of sampling and logprob settings for all of them."""

    prompts: list[list[int]]
    sampling: SamplingParams
    return_logprob: bool = False
    # SGLang's convention: prompt logprobs from this position on; -1 returns none.
    logprob_start_len: int = -1
    # The experts each position was routed to (model/routing.py), from each prompt's position on (per prompt, as
    # `prompts`; empty: from 0). Not a setting of the batch: an agent's turns, each asking from where its last
    # turn's experts ended, decode together.
    return_routed_experts: bool = False
    routed_experts_start_len: list[int] = field(default_factory=list)

    def wants_prompt_logprobs(self) -> bool:
        # A prefill-only request asking for logprobs is scoring the prompt (distillation's teachers).
        return self.return_logprob and (self.logprob_start_len >= 0 or self.sampling.max_new_tokens == 0)

    def settings_key(self) -> str:
        """Equal for batches the engine may decode as one."""
        return f"{self.sampling.model_dump_json()}|{self.return_logprob}|{self.logprob_start_len}|{self.return_routed_experts}"

    def routed_from(self, index: int) -> int:
        """Where prompt `index`'s routed experts start."""
        return self.routed_experts_start_len[index] if self.routed_experts_start_len else 0


def _per_prompt(name: str, value, count: int) -> list:
    if not isinstance(value, list):
        return [value] * count
    if len(value) != count:
        raise ValueError(f"{name}: {len(value)} values for {count} prompts")
    return value


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_ids: IntLists | Ints
    sampling_params: SamplingParams | Annotated[list[SamplingParams], _FIRST_BAD_ITEM] = Field(default_factory=SamplingParams)
    return_logprob: bool | Bools | None = False
    logprob_start_len: int | Ints | None = -1
    rid: str | Strs | None = None
    return_routed_experts: bool | Bools | None = False
    routed_experts_start_len: int | Ints | None = 0
    # SGLang's fields this engine cannot honour: accepted at their "off" value (what SGLang's router sends).
    text: str | Strs | None = None
    stream: bool | None = False
    top_logprobs_num: int | Ints | None = None
    token_ids_logprob: Ints | IntLists | None = None
    return_hidden_states: bool | Bools | None = False

    @model_validator(mode="after")
    def _valid(self) -> GenerateRequest:
        prompts = self.prompts()
        if not prompts:
            raise ValueError("input_ids: no prompts")
        empty = [i for i, prompt in enumerate(prompts) if not prompt]
        if empty:
            raise ValueError(f"input_ids[{empty[0]}]: empty prompt")
        for name in ("sampling_params", "return_logprob", "logprob_start_len", "rid", "top_logprobs_num",
                     "return_hidden_states", "return_routed_experts", "routed_experts_start_len"):
            _per_prompt(name, getattr(self, name), len(prompts))
        unserved = [name for name, wanted in (
            ("text", self.text is not None), ("stream", bool(self.stream)),
            ("top_logprobs_num", any(_per_prompt("top_logprobs_num", self.top_logprobs_num, len(prompts)))),
            ("token_ids_logprob", self.token_ids_logprob is not None),
            ("return_hidden_states", any(_per_prompt("return_hidden_states", self.return_hidden_states, len(prompts)))),
        ) if wanted]
        if unserved:
            raise ValueError(f"{', '.join(unserved)}: not served by this engine (token ids in, token ids out, "
                             f"whole responses)")
        return self

    @property
    def batched(self) -> bool:
        return bool(self.input_ids) and isinstance(self.input_ids[0], list)

    def prompts(self) -> list[list[int]]:
        return self.input_ids if self.batched else [self.input_ids]  # type: ignore[list-item]

    def sampling(self) -> list[SamplingParams]:
        return _per_prompt("sampling_params", self.sampling_params, len(self.prompts()))

    def request_ids(self) -> list[str | None]:
        return _per_prompt("rid", self.rid, len(self.prompts()))

    def uniform_batches(self) -> list[tuple[list[int], UniformBatch]]:
        """The prompts grouped by identical settings, each group with the positions of its prompts."""
        prompts = self.prompts()
        returns = _per_prompt("return_logprob", self.return_logprob, len(prompts))
        starts = _per_prompt("logprob_start_len", self.logprob_start_len, len(prompts))
        routed = _per_prompt("return_routed_experts", self.return_routed_experts, len(prompts))
        routed_starts = _per_prompt("routed_experts_start_len", self.routed_experts_start_len, len(prompts))
        groups: dict[str, tuple[list[int], UniformBatch]] = {}
        for index, (prompt, sampling, wants, start, routes, routed_start) in enumerate(zip(
                prompts, self.sampling(), returns, starts, routed, routed_starts, strict=True)):
            batch = UniformBatch([], sampling, bool(wants), -1 if start is None else start, bool(routes))
            indices, group = groups.setdefault(batch.settings_key(), ([], batch))
            indices.append(index)
            group.prompts.append(prompt)
            group.routed_experts_start_len.append(routed_start or 0)
        return list(groups.values())


class RequestLimits(BaseModel):
    """What one /generate request may ask of an engine (memory grows with prompts × tokens): past either,
    the request is a 413 naming the limit. The defaults hold the pipeline's largest requests (sampled
    evaluation: 1,024 prompts, about 130,000 tokens) four times over."""

    max_prompts: int = Field(4096, ge=1)
    max_tokens: int = Field(524_288, ge=1, description="prompt tokens plus max_new_tokens, summed over the prompts")
    max_in_flight: int = Field(1024, ge=1, description="requests queued or generating at once; past it, a 429")

    def problem(self, request: GenerateRequest) -> str | None:
        prompts = request.prompts()
        if len(prompts) > self.max_prompts:
            return f"input_ids: {len(prompts)} prompts; this engine takes at most {self.max_prompts} per request"
        tokens = sum(len(prompt) + params.max_new_tokens for prompt, params in zip(prompts, request.sampling(), strict=True))
        if tokens > self.max_tokens:
            return (f"{tokens} tokens (prompts plus max_new_tokens for each); this engine takes at most "
                    f"{self.max_tokens} per request")
        return None

    def body_limits(self) -> BodyLimits:
        """What a request body may hold: the largest request these limits allow, with room to spare."""
        return BodyLimits(
            # Each of max_tokens ids in up to 16 bytes (a 10-digit id, its comma, indentation), each of max_prompts
            # prompts with 4 KiB of its own settings (sampling_params written out in full take under 600).
            bytes=self.max_tokens * 16 + self.max_prompts * 4096,
            # Each id one value, each prompt up to 64 more (its sampling_params in full, rid, logprob settings: ~40).
            values=self.max_tokens + self.max_prompts * 64,
            # Each prompt's ids, sampling_params and the lists and objects in it written out in full: 5.
            containers=self.max_prompts * 8,
            # sampling_params in full has 33.
            members=self.max_prompts * 64,
        )


@dataclass(frozen=True)
class BodyLimits:
    """What the engine parses of one request body, each counted before parsing it; past one, a 413 naming it
    (rollout/engine/request_bodies.py). Pydantic validates holding the GIL, and the event loop that answers
    /health waits while it does: so not only the bytes are bounded (12 million ids fit in 24 MiB; 50 MB of
    them held the loop for 30 s) but what costs pydantic most per byte: values (a tenth of a second per
    million ids), containers (a list or a sampling_params each: 400,000 held the loop for 0.6 s) and object
    members (262,144 keys: 0.2 s). The defaults: 24 MiB, 786,432 values, 32,768 containers, 262,144 members."""

    bytes: int
    values: int
    containers: int
    members: int


class FinishReason(BaseModel):
    type: Literal["stop", "length", "abort"]
    matched: int | None = None  # the stop token, for "stop"
    length: int | None = None  # the completion length, for "length"
    message: str | None = None  # why, for "abort"

    def wire(self) -> dict:
        """SGLang's shape: only the fields of this kind of finish."""
        return self.model_dump(exclude_none=True)


# [logprob, token_id, text]: SGLang's LogprobEntry. Token-out engines leave text null; the first prompt
# token has no logprob (nothing precedes it).
LogprobEntry = tuple[float | None, int, str | None]


class MetaInfo(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str = ""
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason
    weight_version: str | None = None
    output_token_logprobs: list[LogprobEntry] | None = None
    input_token_logprobs: list[LogprobEntry] | None = None
    routed_experts: str | None = None  # base64 int32 [positions, num_hidden_layers, top_k] (model/routing.py)
    # Speculative decoding (SGLang's names): verification steps, completion tokens per step, drafts.
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_num_proposed_drafts: int | None = None
    spec_num_correct_drafts: int | None = None


class GenerateOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str = ""
    output_ids: list[int]
    meta_info: MetaInfo


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SGLang clients send e.g. load_format; we load one format

    model_path: str = Field(description="a committed checkpoint URI (file://, s3://) or a local checkpoint directory")
    weight_version: str | None = None


class UpdateWeightsResponse(BaseModel):
    success: bool
    message: str
    weight_version: str


# SGLang's distributed weight update (srt/managers/io_struct.py): the trainer and its engines form a
# torch.distributed group of their own (rollout/process_group.py), then the trainer broadcasts.
GROUP_NAME = "weight_update_group"  # SGLang's default


# A host name's labels: letters, digits and inner hyphens, and underscores (Docker's container names have them).
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def _host(address: str) -> str:
    """An IP address or a host name: what TCPStore connects to, never a URL, a host:port or shell words."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if len(address) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in address.removesuffix(".").split(".")):
            raise ValueError(f"{address[:100]!r} is neither an IP address nor a host name") from None
    return address


class InitWeightsUpdateGroup(BaseModel):
    """SGLang's InitWeightsUpdateGroupReqInput. Validated on both sides: the trainer builds it, the engine
    parses it (a bad field is a 422 naming it, never a join that waits out its timeout)."""

    model_config = ConfigDict(extra="ignore")
    master_address: Annotated[str, AfterValidator(_host)]
    # Strict: a port or rank given as true or "1" is a mistake, not 1.
    master_port: int = Field(ge=1, le=65535, strict=True)
    rank_offset: int = Field(ge=1, strict=True, description="this engine's rank; the trainer is rank 0")
    world_size: int = Field(ge=2, lt=2**31, strict=True, description="the trainer and every engine rank (torch's ranks are C ints)")
    group_name: str = Field(GROUP_NAME, pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    backend: Literal["gloo", "nccl"] = "nccl"

    @model_validator(mode="after")
    def _rank_in_group(self) -> InitWeightsUpdateGroup:
        if self.rank_offset >= self.world_size:
            raise ValueError(f"rank_offset: {self.rank_offset}; a group of world_size {self.world_size} has ranks "
                             f"1 to {self.world_size - 1} for engines")
        return self


# SGLang's load_format for a distributed update whose tensors travel as one broadcast: their bytes back to back.
FLATTENED_BUCKET = "flattened_bucket"


class UpdateWeightsFromDistributed(BaseModel):
    """SGLang's UpdateWeightsFromDistributedReqInput (the fields a dense model's update uses)."""

    model_config = ConfigDict(extra="ignore")
    names: Strs
    dtypes: Strs
    shapes: IntLists
    group_name: str = GROUP_NAME
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    load_format: str | None = None


# What a weight update request's body may hold: UpdateWeightsFromDistributed lists every tensor it sends, up to
# 2^17 of them (a model written per expert has tens of thousands: Qwen3-235B about 36,000), each in up to 256
# bytes and 8 values (name, dtype, shape). The other weight update requests are a few fields.
MAX_TENSORS = 2**17
WEIGHT_UPDATE_BODY = BodyLimits(bytes=MAX_TENSORS * 256, values=MAX_TENSORS * 8, containers=MAX_TENSORS + 8, members=64)
