"""The subset of SGLang's native HTTP protocol our trainers use, as pydantic models.

Requests and responses have SGLang's shapes (`/generate` with `input_ids` and `sampling_params`,
`meta_info` with `output_token_logprobs` as `[logprob, token_id, None]` triples), so a real SGLang
server can stand in for `rollout.server` at scale. Unknown fields are refused rather than ignored:
a misspelt sampling parameter would otherwise change nothing, silently.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# As SGLang does: a temperature this small samples greedily (dividing logits by it would overflow).
GREEDY_BELOW = 1e-6


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    temperature: float = Field(1.0, ge=0.0, description=f"0 (or below {GREEDY_BELOW:g}) is greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(128, ge=0)
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    sampling_seed: int | None = Field(None, description="seeds this request's sampling; default: engine seed and request count")


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_ids: list[list[int]] | list[int]
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    return_logprob: bool = False
    # SGLang's convention: prompt logprobs from this position on; -1 returns none.
    logprob_start_len: int = -1

    @model_validator(mode="after")
    def _not_empty(self) -> GenerateRequest:
        prompts = self.prompts()
        if not prompts:
            raise ValueError("input_ids: no prompts")
        empty = [i for i, prompt in enumerate(prompts) if not prompt]
        if empty:
            raise ValueError(f"input_ids[{empty[0]}]: empty prompt")
        return self

    @property
    def batched(self) -> bool:
        return bool(self.input_ids) and isinstance(self.input_ids[0], list)

    def prompts(self) -> list[list[int]]:
        return self.input_ids if self.batched else [self.input_ids]  # type: ignore[list-item]

    def wants_prompt_logprobs(self) -> bool:
        # A prefill-only request asking for logprobs is scoring the prompt (distillation's teachers).
        return self.return_logprob and (self.logprob_start_len >= 0 or self.sampling_params.max_new_tokens == 0)


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
        tokens = sum(len(prompt) for prompt in prompts) + len(prompts) * request.sampling_params.max_new_tokens
        if tokens > self.max_tokens:
            return (f"{tokens} tokens (prompts plus max_new_tokens for each); this engine takes at most "
                    f"{self.max_tokens} per request")
        return None


class FinishReason(BaseModel):
    type: Literal["stop", "length"]
    matched: int | None = None  # the stop token, for "stop"
    length: int | None = None  # the completion length, for "length"


class MetaInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason
    weight_version: str
    output_token_logprobs: list[tuple[float, int, None]] | None = None
    # The first prompt token has no logprob (nothing precedes it): SGLang reports None there.
    input_token_logprobs: list[tuple[float | None, int, None]] | None = None


class GenerateOutput(BaseModel):
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
