"""Hostile request bodies against the engine process (issue 43): a body too large to read is a 413 naming the
limit before it is parsed, what is parsed is parsed off the event loop (/health answers within a second
throughout), and a weight update group request is checked field by field, its join bounded by a timeout."""

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
import requests
from pydantic import ValidationError

from infra.ports import free_port
from rollout.auth import API_KEY_ENV
from rollout.process import EngineProcess
from rollout.protocol import MAX_TENSORS, GenerateRequest, RequestLimits, SamplingParams
from rollout.weight_push import DistributedWeightPush, WeightGroupError
from tests.test_rollout_engine import save_checkpoint

KEY = "hostile-bodies-key"
AUTH = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
JOIN_TIMEOUT_S = 3
LIMIT = RequestLimits().body_limits().bytes


@pytest.fixture(scope="module")
def engine(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-bodies")
    process = EngineProcess(str(save_checkpoint(tokenizer, root / "checkpoint", seed=1)), root / "engine.log", threads=1)
    process.service.args += ["--api-key", KEY, "--weight-group-join-timeout-s", str(JOIN_TIMEOUT_S)]
    process.start()
    yield process.url
    process.stop()
    assert process.service.process.poll() is not None  # nothing left behind


def while_health_polled(url, send):
    """`send()`'s response, and the slowest /health answer while it ran."""
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(send)
        slowest = 0.0
        while not sent.done():
            started = time.monotonic()
            requests.get(f"{url}/health", timeout=60).raise_for_status()
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
        return sent.result(), slowest


def post(url, path, data):
    return requests.post(f"{url}{path}", data=data, headers=AUTH, timeout=120)


def in_chunks(body, size=1 << 16):  # no Content-Length: requests sends a generator chunked
    yield from (body[start:start + size] for start in range(0, len(body), size))


def test_a_body_past_the_limit_is_a_413_naming_it_before_it_is_read(engine):
    big = b'{"input_ids": [' + b"5," * 25_000_000 + b"5]}"  # 50 MB: 30 s of parsing on the event loop, once
    for data, size in ((big, f"{len(big)} bytes"), (in_chunks(big), f"over {LIMIT} bytes")):
        started = time.monotonic()
        response, slowest = while_health_polled(engine, partial(post, engine, "/generate", data))
        assert response.status_code == 413, response.text
        assert response.json()["detail"] == (f"request body: {size}; this engine takes at most {LIMIT} bytes per "
                                             f"request (what --max-request-tokens and --max-prompts allow)")
        assert time.monotonic() - started < 5 and slowest < 1


# Bodies within the byte limit that held the event loop for seconds (pydantic holds the GIL), by what the
# engine answers now: too many values, lists and objects, or members to parse quickly, the 422 of a few thousand
# sampling_params (Python validators: the loop runs between them in a thread), of 700,001 bad ids (named at
# the first).
WITHIN_THE_BYTES = {
    "8 million ids": (b'{"input_ids": [' + b"5," * 8_000_000 + b"5]}", 413,
                      "8000003 JSON values (by its commas and brackets); this engine takes at most 786432 JSON values"),
    "a 300,000-key logit_bias": (b'{"input_ids": [5], "sampling_params": {"logit_bias": {'
                                 + b",".join(b'"%d": 1' % i for i in range(300_000)) + b"}}}", 413,
                                 "300003 object members (by their colons); this engine takes at most 262144 object members"),
    "300,001 sampling_params": (b'{"input_ids": [5], "sampling_params": [' + b"{}," * 300_000 + b"{}]}", 413,
                                "300004 lists and objects (by their brackets); this engine takes at most 32768 lists and objects"),
    "16,000 sampling_params": (b'{"input_ids": [5], "sampling_params": [' + b'{"top_k": -1},' * 15_999
                               + b'{"top_k": -1}]}', 422, "sampling_params: 16000 values for 1 prompts"),
    "700,001 ids that are strings": (b'{"input_ids": [' + b'"a",' * 700_000 + b'"a"]}', 422, "input_ids"),
}


@pytest.mark.parametrize("name", WITHIN_THE_BYTES)
def test_a_body_within_the_byte_limit_never_holds_up_health(engine, name):
    body, status, named = WITHIN_THE_BYTES[name]
    assert len(body) < LIMIT
    response, slowest = while_health_polled(engine, partial(post, engine, "/generate", body))
    assert response.status_code == status and named in response.text, response.text[:300]
    assert len(response.text) < 10_000 and slowest < 1


def test_bad_fields_are_still_located_and_the_engine_still_generates(engine):
    bad = post(engine, "/generate", b'{"input_ids": [5, 6], "sampling_params": {"temperature": NaN}}')
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "sampling_params", "temperature"]
    assert post(engine, "/generate", b"[5,").json()["detail"][0]["type"] == "json_invalid"
    served = post(engine, "/generate", json.dumps({"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}}))
    assert served.status_code == 200 and len(served.json()["output_ids"]) == 2


def test_the_largest_request_the_limits_allow_fits_the_body_limit():
    limits = RequestLimits()
    count = limits.max_prompts
    settings = SamplingParams(max_new_tokens=0, stop_token_ids=[2**31 - 1] * 4, sampling_seed=2**31 - 1).model_dump()
    largest = {"input_ids": [[2**31 - 1] * (limits.max_tokens // count)] * count, "sampling_params": [settings] * count,
               "rid": [str(uuid.uuid4()) for _ in range(count)], "return_logprob": [True] * count,
               "logprob_start_len": [0] * count}
    body = json.dumps(largest, indent=1).encode()  # every id on a line of its own
    assert len(body) <= limits.body_limits().bytes
    assert body.count(b",") + body.count(b"[") + body.count(b"{") < limits.body_limits().values
    assert body.count(b"[") + body.count(b"{") <= limits.body_limits().containers
    assert body.count(b":") <= limits.body_limits().members
    assert limits.problem(GenerateRequest.model_validate_json(body)) is None


def test_a_weight_update_is_limited_by_the_tensors_it_may_list(engine):
    tensors = [f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight" for i in range(MAX_TENSORS)]
    largest = json.dumps({"names": tensors, "dtypes": ["bfloat16"] * MAX_TENSORS, "shapes": [[7168, 2048]] * MAX_TENSORS})
    response, slowest = while_health_polled(engine, partial(post, engine, "/update_weights_from_distributed", largest))
    assert response.status_code == 400 and "init_weights_update_group first" in response.text  # read, then refused
    assert slowest < 1
    more = post(engine, "/update_weights_from_distributed",
                b'{"names": [], "dtypes": [], "shapes": [' + b"[1]," * (MAX_TENSORS + 8) + b"[1]]}")
    assert more.status_code == 413 and (f"this engine takes at most {MAX_TENSORS + 8} lists and objects per request "
                                        f"(a weight update lists at most {MAX_TENSORS} tensors)") in more.text


@pytest.mark.parametrize(("field", "value"), [
    ("master_address", "a b;c"), ("master_address", "127.0.0.1:1"), ("master_address", "http://trainer"),
    ("master_port", 0), ("master_port", 65536), ("master_port", "29500"), ("rank_offset", 0), ("rank_offset", 2),
    ("world_size", 2**31), ("group_name", ""), ("group_name", "a\nb"), ("backend", "mpi"),
])
def test_a_weight_group_request_with_a_bad_field_is_a_422_naming_it(engine, field, value):
    body = {"master_address": "127.0.0.1", "master_port": free_port(), "rank_offset": 1, "world_size": 2,
            "backend": "gloo", field: value}
    started = time.monotonic()
    response = post(engine, "/init_weights_update_group", json.dumps(body))
    assert response.status_code == 422, response.text
    assert any(field in e["loc"] or field in e["msg"] for e in response.json()["detail"]), response.text
    assert time.monotonic() - started < JOIN_TIMEOUT_S  # refused, not joined


@pytest.mark.parametrize(("field", "value"), [("master_address", "a b;c"), ("master_port", 0), ("backend", "mpi")])
def test_the_trainer_refuses_a_bad_group_before_asking_an_engine(field, value):
    unanswered = f"http://127.0.0.1:{free_port()}"  # asked, it would be named unreachable instead
    settings = {"backend": "gloo", "master_address": "127.0.0.1", "master_port": free_port(), field: value}
    with pytest.raises(ValidationError, match=field):
        DistributedWeightPush([unanswered], **settings)


def test_a_master_nobody_listens_on_is_named_within_the_join_timeout(engine):
    port = free_port()
    body = {"master_address": "127.0.0.1", "master_port": port, "rank_offset": 1, "world_size": 2, "backend": "gloo"}
    started = time.monotonic()
    response, slowest = while_health_polled(engine, partial(post, engine, "/init_weights_update_group", json.dumps(body)))
    assert response.status_code == 400 and response.json()["success"] is False
    assert f"no weight update group master listens at 127.0.0.1:{port} (waited {JOIN_TIMEOUT_S} s)" in response.text
    assert JOIN_TIMEOUT_S <= time.monotonic() - started < JOIN_TIMEOUT_S + 5 and slowest < 1


def test_the_trainer_is_told_why_an_engine_did_not_join(engine, monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, KEY)
    port = free_port()  # 192.0.2.1 is for documentation: no engine reaches a master there
    with pytest.raises(WeightGroupError, match=rf"answered 400: .*no weight update group master listens at "
                                               rf"192\.0\.2\.1:{port} \(waited {JOIN_TIMEOUT_S} s\)"):
        DistributedWeightPush([engine], backend="gloo", master_address="192.0.2.1", master_port=port,
                              join_timeout_s=JOIN_TIMEOUT_S)


@pytest.mark.parametrize("seconds", ["0", "nan"])
def test_the_engine_refuses_a_join_timeout_that_is_not_a_positive_number_of_seconds(seconds):
    started = subprocess.run([sys.executable, "-m", "rollout.engine.server", "--checkpoint", "unread", "--port", "1",
                              "--weight-group-join-timeout-s", seconds], capture_output=True, text=True, timeout=120)
    assert started.returncode == 2 and "--weight-group-join-timeout-s" in started.stderr, started.stderr
