"""Our engine is a worker SGLang's router can front, and our client speaks SGLang's /generate: requests and
responses are checked against SGLang's own contract types (sglang.api.v1.api_types), and the router is the
real sglang-router."""

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from model.presets import build_model
from model.routing import decode_routed
from rollout.client import generate_payload, scoring_payload
from rollout.fleet import Fleet
from rollout.process import EngineProcess, RouterProcess
from rollout.protocol import ENGINE_HEADER, NO_TOP_K, SamplingParams
from rollout.router import ROUTING_KEY_HEADER
from tests.sglang_types import api_types, request_fields

PROMPTS = [[11, 12, 13, 14, 15], [21, 22, 23], [31, 32, 33, 34]]

sampling_params = st.builds(
    SamplingParams,
    temperature=st.floats(0, 4), top_p=st.floats(0.01, 1), top_k=st.sampled_from([-1, 1, 5, NO_TOP_K]),
    min_p=st.floats(0, 1), max_new_tokens=st.integers(0, 512), stop_token_ids=st.lists(st.integers(0, 50_000), max_size=3),
    ignore_eos=st.booleans(), sampling_seed=st.none() | st.integers(0, 2**31),
)


@pytest.fixture(scope="module")
def engine_url(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang-contract")
    build_model("glm5-tiny", tokenizer, seed=0).save_pretrained(root / "checkpoint")
    tokenizer.save_pretrained(root / "checkpoint")
    with EngineProcess(str(root / "checkpoint"), root / "engine.log", seed=0) as client:
        yield client.base_url


@pytest.fixture(scope="module")
def router_url(engine_url, tmp_path_factory):
    with RouterProcess([engine_url], tmp_path_factory.mktemp("router") / "router.log") as url:
        yield url


@given(sampling=sampling_params, batched=st.booleans(), return_logprob=st.booleans())
def test_every_generate_request_our_client_sends_is_one_sglang_accepts(sampling, batched, return_logprob):
    payload = generate_payload(PROMPTS if batched else PROMPTS[0], sampling, return_logprob)
    parsed = api_types().GenerateRequest.from_json_value(payload)
    assert parsed.input_ids == payload["input_ids"] and parsed.return_logprob == return_logprob
    assert parsed.sampling_params.max_new_tokens == sampling.max_new_tokens
    assert parsed.sampling_params.temperature == sampling.temperature
    scoring = api_types().GenerateRequest.from_json_value(scoring_payload(PROMPTS))
    assert (scoring.sampling_params.max_new_tokens, scoring.logprob_start_len) == (0, 0)


def test_routed_experts_are_asked_for_and_answered_in_sglangs_names(engine_url):
    """SGLang's /generate takes return_routed_experts (io_struct's GenerateReqInput; its typed v1 API has not
    got it yet) and answers meta_info.routed_experts; so do our client and engine."""
    payload = generate_payload(PROMPTS, SamplingParams(max_new_tokens=3), routed_experts=True)
    accepted = request_fields("srt/managers/io_struct.py", "GenerateReqInput")
    assert {key for key in payload if key not in ("input_ids", "sampling_params", "return_logprob")} == \
        {"return_routed_experts"} <= set(accepted)
    assert "routed_experts_start_len" in accepted
    answer = requests.post(f"{engine_url}/generate", json=payload | {"routed_experts_start_len": 2}, timeout=60).json()
    for prompt, output in zip(PROMPTS, answer, strict=True):
        routed = decode_routed(output["meta_info"]["routed_experts"], 3, 2)  # glm5-tiny: 3 layers, top-2
        assert len(routed) == len(prompt) + len(output["output_ids"]) - 1 - 2  # from position 2 on


def test_the_engine_answers_batched_per_item_requests_in_sglangs_shape(engine_url):
    greedy = {"temperature": 0, "max_new_tokens": 6, "ignore_eos": True}
    body = {
        "input_ids": PROMPTS,
        "sampling_params": [greedy, {"max_new_tokens": 0}, {**greedy, "max_new_tokens": 4, "top_k": 3}],
        "return_logprob": [True, True, False],
        "logprob_start_len": [-1, 0, -1],
        "rid": ["a", "b", "c"],
    }
    api_types().GenerateRequest.from_json_value(body)  # SGLang's own server would take this body
    answer = requests.post(f"{engine_url}/generate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    outputs = [api_types().GenerateResponse.from_json_value(o) for o in answer.json()]
    decoded, scored, plain = outputs
    assert [o.meta_info.id for o in outputs] == ["a", "b", "c"]
    assert all(o.meta_info.weight_version == "0" for o in outputs)
    assert type(decoded.meta_info.finish_reason).__name__ == "FinishLength" and len(decoded.output_ids) == 6
    assert [e.token_id for e in decoded.meta_info.output_token_logprobs] == decoded.output_ids
    assert all(e.logprob <= 0 and e.text is None for e in decoded.meta_info.output_token_logprobs)
    # Prefill scoring: every prompt token's logprob from position 0, None for the first.
    assert scored.output_ids == [] and [e.token_id for e in scored.meta_info.input_token_logprobs] == PROMPTS[1]
    assert scored.meta_info.input_token_logprobs[0].logprob is None
    assert all(e.logprob < 0 for e in scored.meta_info.input_token_logprobs[1:])
    assert plain.meta_info.output_token_logprobs is None and len(plain.output_ids) == 4
    # Each item is served as it would be alone.
    alone = requests.post(f"{engine_url}/generate", json={"input_ids": PROMPTS[0], "sampling_params": greedy,
                                                          "return_logprob": True}, timeout=60).json()
    assert alone["output_ids"] == decoded.output_ids


def test_a_stop_token_ends_with_sglangs_stop_object(engine_url):
    greedy = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
    first = requests.post(f"{engine_url}/generate", json={"input_ids": PROMPTS[0], "sampling_params": greedy}, timeout=60)
    stop = first.json()["output_ids"][2]
    stopped = requests.post(f"{engine_url}/generate", timeout=60, json={
        "input_ids": PROMPTS[0], "sampling_params": {**greedy, "stop_token_ids": [stop]}}).json()
    finish = api_types().GenerateResponse.from_json_value(stopped).meta_info.finish_reason
    assert type(finish).__name__ == "FinishStop" and finish.matched == stop


@pytest.mark.parametrize(("body", "named"), [
    ({"input_ids": [5, 6], "stream": True}, "stream"),
    ({"text": "hello"}, "input_ids"),
    ({"input_ids": [5, 6], "text": "hello"}, "text"),
    ({"input_ids": [5, 6], "top_logprobs_num": 2}, "top_logprobs_num"),
    ({"input_ids": [5, 6], "sampling_params": {"stop": ["x"]}}, "stop"),
    ({"input_ids": [5, 6], "sampling_params": {"n": 2}}, "n"),
    ({"input_ids": [5, 6], "sampling_params": {"max_new_tokenz": 2}}, "max_new_tokenz"),
    ({"input_ids": [[5, 6], [7]], "sampling_params": [{"max_new_tokens": 1}]}, "1 values for 2 prompts"),
])
def test_what_the_engine_cannot_honour_is_refused_naming_the_field(engine_url, body, named):
    answer = requests.post(f"{engine_url}/generate", json=body, timeout=60)
    assert answer.status_code in (400, 422) and named in answer.text, answer.text


def test_the_engine_serves_behind_sglangs_router_with_the_fields_it_adds(router_url, engine_url):
    workers = requests.get(f"{router_url}/workers", timeout=10).json()["workers"]
    assert [(w["url"], w["is_healthy"]) for w in workers] == [(engine_url, True)]
    body = {"input_ids": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True},
            "return_logprob": True, "unknown_field": 1}
    answer = requests.post(f"{router_url}/generate", json=body, headers={ROUTING_KEY_HEADER: "rollout-1"}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers[ENGINE_HEADER] == engine_url
    direct = requests.post(f"{engine_url}/generate", json=body, timeout=60).json()
    assert api_types().GenerateResponse.from_json_value(answer.json()).output_ids == direct["output_ids"]

    async def one_turn():
        async with Fleet(router_url) as fleet:
            sample = await fleet.generate("rollout-2", PROMPTS[1], SamplingParams(temperature=0, max_new_tokens=3))
            return sample, fleet.finish("rollout-2")

    sample, replicas = asyncio.run(one_turn())
    assert len(sample.output_ids) <= 3 and len(sample.output_logprobs) == len(sample.output_ids)
    assert replicas == [engine_url]


OWNER = """
import sys, time
from pathlib import Path
from rollout.process import RouterProcess
router = RouterProcess(["http://127.0.0.1:9"], Path(sys.argv[1]))
router.launch()
print(router.process.pid, flush=True)
time.sleep(600)
"""


def test_the_router_dies_with_the_process_that_started_it(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "router.log")], stdout=subprocess.PIPE, text=True)
    router = int(owner.stdout.readline())
    time.sleep(2)  # the router is up and serving (its Rust loop holds the interpreter)
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 15
    while Path(f"/proc/{router}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{router}").exists()
