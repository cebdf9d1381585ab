"""The one way trainers talk to a rollout engine (ours or SGLang): token ids in, token ids out."""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests

from rollout.auth import bearer_headers
from rollout.protocol import GenerateOutput, SamplingParams


class EngineUnavailableError(RuntimeError):
    pass


class EngineRequestError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sample:
    """One completion exactly as the engine produced it (TITO: never re-tokenized)."""

    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: str  # "stop" or "length"
    weight_version: str
    # SGLang's meta_info.routed_experts (base64; model/routing.py), where the request asked for it.
    routed_experts: str | None = None
    # Speculative decoding's verification steps and the drafts that stood in them (SGLang's meta_info.spec_verify_ct,
    # spec_num_correct_drafts), where the engine speculated.
    spec_verify_ct: int | None = None
    spec_num_correct_drafts: int | None = None

    @property
    def speculated_tokens(self) -> int:
        """The tokens verification steps gave: one per step and the drafts that stood in it. Not the completion's
        length: an engine that speculates only once few rows of a batch decode decoded the ones before plainly."""
        return (self.spec_verify_ct or 0) + (self.spec_num_correct_drafts or 0)


def accept_length(samples: list[Sample]) -> float | None:
    """Speculative decoding's tokens per verification step over `samples` (SGLang's spec_accept_length, pooled):
    None where no engine speculated."""
    tokens, steps = speculated(samples)
    return tokens / steps if steps else None


def speculated(samples: list[Sample]) -> tuple[int, int]:
    """(tokens decoded speculatively, their verification steps) over `samples`; (0, 0) where no engine speculated."""
    return sum(s.speculated_tokens for s in samples), sum(s.spec_verify_ct or 0 for s in samples)


def generate_payload(prompts: list[list[int]], sampling: SamplingParams, return_logprob: bool = True,
                     routed_experts: bool = False, routed_experts_from: int = 0) -> dict:
    """A /generate body in SGLang's shape; sampling parameters left at SGLang's defaults are not sent.
    `routed_experts`: each position's experts back in meta_info, from position `routed_experts_from` on
    (SGLang serves them with --enable-return-routed-experts)."""
    routed = {"return_routed_experts": True} if routed_experts else {}
    if routed_experts and routed_experts_from:
        routed["routed_experts_start_len"] = routed_experts_from
    return {"input_ids": prompts, "sampling_params": sampling.model_dump(exclude_defaults=True),
            "return_logprob": return_logprob, **routed}


def scoring_payload(prompts: list[list[int]]) -> dict:
    """Prefill only, with the logprob of every prompt token: SGLang's way to score a sequence."""
    return {"input_ids": prompts, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True, "logprob_start_len": 0}


def samples_from_answer(base_url: str, prompts: list[list[int]], answer: list) -> list[Sample]:
    """The engine's /generate answer to a batched request, one Sample per prompt."""
    outputs = [GenerateOutput.model_validate(o) for o in answer]
    if len(outputs) != len(prompts):
        raise EngineRequestError(f"{base_url}: {len(outputs)} completions for {len(prompts)} prompts")
    aborted = [o.meta_info.finish_reason for o in outputs if o.meta_info.finish_reason.type == "abort"]
    if aborted:
        raise EngineRequestError(f"{base_url}: the engine aborted a generation: {aborted[0].message}")
    return [
        Sample(prompt, o.output_ids, [lp for lp, _, _ in o.meta_info.output_token_logprobs or []],
               o.meta_info.finish_reason.type, o.meta_info.weight_version or "", o.meta_info.routed_experts,
               o.meta_info.spec_verify_ct, o.meta_info.spec_num_correct_drafts)
        for prompt, o in zip(prompts, outputs, strict=True)
    ]


class EngineClient:
    def __init__(self, base_url: str, timeout_s: float = 600.0):
        self.base_url, self.timeout_s = base_url.rstrip("/"), timeout_s

    def _post(self, path: str, payload: dict) -> object:
        try:
            response = requests.post(f"{self.base_url}{path}", json=payload, timeout=self.timeout_s,
                                     headers=bearer_headers())
        except requests.RequestException as error:
            raise EngineUnavailableError(f"rollout engine at {self.base_url} is unreachable: {error}") from error
        if response.status_code != 200:
            detail = response.json().get("detail", response.text) if response.headers.get("content-type", "").startswith("application/json") else response.text
            raise EngineRequestError(f"{self.base_url}{path} answered {response.status_code}: {detail}")
        return response.json()

    def health(self) -> dict:
        try:
            response = requests.get(f"{self.base_url}/health", timeout=5, headers=bearer_headers())
            response.raise_for_status()
        except requests.RequestException as error:
            raise EngineUnavailableError(f"rollout engine at {self.base_url} is not healthy: {error}") from error
        return response.json()

    def wait_until_healthy(self, timeout_s: float = 120.0, is_alive=lambda: True) -> dict:
        """Poll /health; `is_alive` lets a caller that started the engine stop waiting once it died."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.health()
            except EngineUnavailableError:
                if time.monotonic() > deadline or not is_alive():
                    raise
                time.sleep(0.2)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, return_logprob: bool = True,
                 routed_experts: bool = False) -> list[Sample]:
        answer = self._post("/generate", generate_payload(prompts, sampling, return_logprob, routed_experts))
        return samples_from_answer(self.base_url, prompts, answer)

    def prompt_logprobs(self, prompts: list[list[int]]) -> list[list[float | None]]:
        """log p(token | tokens before it) for every prompt token (None for the first): prefill only."""
        outputs = [GenerateOutput.model_validate(o) for o in self._post("/generate", scoring_payload(prompts))]
        return [[lp for lp, _, _ in o.meta_info.input_token_logprobs or []] for o in outputs]

    def update_weights(self, checkpoint: str, weight_version: str | None = None) -> str:
        payload = {"model_path": checkpoint} | ({"weight_version": weight_version} if weight_version else {})
        return self._post("/update_weights", payload)["weight_version"]
