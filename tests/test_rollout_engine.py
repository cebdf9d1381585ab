"""The rollout engine as a separate HTTP process, checked against full forwards of the same model."""

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import torch

from infra.ports import free_port
from model.dsa import install_dsa_indexers, set_dense_attention
from model.presets import build_model, load_model
from rollout.client import EngineClient, EngineRequestError, EngineUnavailableError
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams
from stages.common.rl_batches import train_batch

PROMPT_LENGTHS = (56, 23, 70)  # two of them past index_topk (48) before any token is generated


def save_checkpoint(tokenizer, directory, seed):
    model = build_model("glm5-tiny", tokenizer, seed=seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def refused_updates(checkpoint, tmp_path):
    """Checkpoints an engine must refuse before loading them, with the status and the reason it gives."""
    def variant(name, **config_changes):
        folder = tmp_path / name
        shutil.copytree(checkpoint, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
        return folder

    huge = variant("huge")
    with open(huge / "model.safetensors", "r+b") as weights:  # sparse: a terabyte on paper, no disk used
        weights.truncate(2**40)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    shutil.copytree(checkpoint, outside)
    return [
        (variant("vocab", vocab_size=2_000_000), 422, "vocab_size: serving"),  # refused before 2M rows exist
        (variant("orm", architectures=["Glm5ForSequenceClassification"]), 422, "architectures"),
        (huge, 413, "GiB of memory available"),
        (outside, 403, "--weights-dir"),
    ]


@pytest.fixture(scope="module")
def checkpoints(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    return save_checkpoint(tokenizer, root / "a", seed=1), save_checkpoint(tokenizer, root / "b", seed=2)


@pytest.fixture(scope="module")
def engine(checkpoints, tmp_path_factory):
    process = EngineProcess(str(checkpoints[0]), tmp_path_factory.mktemp("engine-log") / "engine.log", seed=3)
    client = process.start()
    yield client
    process.stop()


def prompts(tokenizer, lengths=PROMPT_LENGTHS, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(10, len(tokenizer), (n,), generator=generator).tolist() for n in lengths]


def sparse_model(directory):
    model = load_model(directory).eval()
    install_dsa_indexers(model)
    set_dense_attention(model, dense=False)
    return model


@torch.no_grad()
def full_forward_logprobs(model, ids, temperature=1.0):
    """log p(ids[t] | ids[:t]) for t ≥ 1 from one forward of the whole unpadded sequence."""
    logits = model(torch.tensor([ids])).logits[0, :-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)


def test_batched_sampled_logprobs_equal_a_full_forward_past_index_topk(engine, checkpoints, tokenizer):
    batch = prompts(tokenizer)
    samples = engine.generate(batch, SamplingParams(temperature=1.0, max_new_tokens=30, ignore_eos=True))
    model = sparse_model(checkpoints[0])
    assert [len(s.output_ids) for s in samples] == [30, 30, 30]
    for prompt, sample in zip(batch, samples, strict=True):
        assert sample.prompt_ids == prompt and sample.finish_reason == "length" and sample.weight_version == "0"
        recomputed = full_forward_logprobs(model, prompt + sample.output_ids)[len(prompt) - 1:]
        assert torch.allclose(torch.tensor(sample.output_logprobs), recomputed, atol=1e-4), (
            (torch.tensor(sample.output_logprobs) - recomputed).abs().max()
        )


def test_generation_stops_at_a_requested_stop_token_and_is_seeded(engine, tokenizer):
    batch = prompts(tokenizer, (35, 20))
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True)
    free_run = engine.generate(batch, greedy)
    stop = free_run[0].output_ids[4]
    stopped = engine.generate(batch, greedy.model_copy(update={"stop_token_ids": [stop]}))
    first = free_run[0].output_ids.index(stop)
    assert stopped[0].output_ids == free_run[0].output_ids[: first + 1] and stopped[0].finish_reason == "stop"
    # The row that finished early left the batch; the other one decodes on exactly as before.
    other = free_run[1].output_ids
    expected = other[: other.index(stop) + 1] if stop in other else other
    assert stopped[1].output_ids == expected and len(expected) > first + 1
    assert torch.allclose(torch.tensor(stopped[1].output_logprobs), torch.tensor(free_run[1].output_logprobs[: len(expected)]), atol=1e-5)

    seeded = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=10, ignore_eos=True, sampling_seed=7)
    assert engine.generate(batch, seeded) == engine.generate(batch, seeded)


def test_prefill_only_returns_prompt_logprobs(engine, checkpoints, tokenizer):
    batch = prompts(tokenizer, (45, 12))
    scored = engine.prompt_logprobs(batch)
    model = sparse_model(checkpoints[0])
    for prompt, logprobs in zip(batch, scored, strict=True):
        assert len(logprobs) == len(prompt) and logprobs[0] is None
        assert torch.allclose(torch.tensor(logprobs[1:]), full_forward_logprobs(model, prompt), atol=1e-4)


def test_update_weights_bumps_the_version_and_serves_the_new_weights(engine, checkpoints, tokenizer, tmp_path):
    local = checkpoints[0].parent
    with EngineProcess(str(checkpoints[0]), tmp_path / "engine.log", weights_dirs=[local, tmp_path]) as client:
        batch = prompts(tokenizer, (33,))
        assert client.update_weights(str(checkpoints[1])) == "1"
        assert client.health()["weight_version"] == "1"
        sample = client.generate(batch, SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True))[0]
        assert sample.weight_version == "1"
        recomputed = full_forward_logprobs(sparse_model(checkpoints[1]), batch[0] + sample.output_ids)[len(batch[0]) - 1:]
        assert torch.allclose(torch.tensor(sample.output_logprobs), recomputed, atol=1e-4)
        with pytest.raises(EngineRequestError, match="not a checkpoint directory"):
            client.update_weights(str(tmp_path))
        assert client.health()["weight_version"] == "1"  # a failed update leaves the served weights alone
        for refused, status, reason in refused_updates(checkpoints[1], tmp_path):
            with pytest.raises(EngineRequestError, match=reason) as error:
                client.update_weights(str(refused))
            assert f"answered {status}" in str(error.value)
        assert client.health()["weight_version"] == "1"

        # Switched back, it samples what a fresh engine on those weights samples, whatever it served before:
        # what lets one engine serve a stage's evaluations and its training.
        client.update_weights(str(checkpoints[0]))
        seeded = SamplingParams(temperature=1.0, max_new_tokens=8, ignore_eos=True, sampling_seed=5)
        shared, fresh = client.generate(batch, seeded), engine.generate(batch, seeded)
        assert [(s.output_ids, s.output_logprobs) for s in shared] == [(s.output_ids, s.output_logprobs) for s in fresh]


def test_bad_requests_are_refused_naming_the_problem(engine, tokenizer):
    with pytest.raises(EngineRequestError, match=r"input_ids\[1\]: a prompt of 4096 tokens"):
        engine.generate([[5] * 10, [5] * 4096], SamplingParams(max_new_tokens=1))
    with pytest.raises(EngineRequestError, match=r"input_ids\[0\]: token id 999999"):
        engine.generate([[5, 999999]], SamplingParams(max_new_tokens=1))
    response = requests.post(f"{engine.base_url}/generate",
                             json={"input_ids": [5, 6], "sampling_params": {"temprature": 0.5}}, timeout=30)
    assert response.status_code == 422 and "temprature" in response.text
    for field, value in (("temperature", float("nan")), ("top_p", float("nan")), ("temperature", float("inf"))):
        body = json.dumps({"input_ids": [5, 6], "sampling_params": {field: value}})  # NaN / Infinity literals
        response = requests.post(f"{engine.base_url}/generate", data=body, timeout=30,
                                 headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "sampling_params", field]


def test_requests_past_the_engines_limits_are_413s_naming_the_limit(engine):
    many = requests.post(f"{engine.base_url}/generate", timeout=60,
                         json={"input_ids": [[5]] * 4097, "sampling_params": {"max_new_tokens": 1}})
    assert many.status_code == 413 and "at most 4096 per request" in many.text
    long = requests.post(f"{engine.base_url}/generate", timeout=60,
                         json={"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 600_000}})
    assert long.status_code == 413 and "600002 tokens" in long.text and "at most 524288" in long.text


def test_a_temperature_below_the_floor_samples_greedily(engine, tokenizer):
    batch = prompts(tokenizer, (9, 14))
    greedy = engine.generate(batch, SamplingParams(temperature=0.0, max_new_tokens=8, ignore_eos=True))
    tiny = engine.generate(batch, SamplingParams(temperature=1e-300, max_new_tokens=8, ignore_eos=True))
    assert [s.output_ids for s in tiny] == [s.output_ids for s in greedy]
    assert all(all(lp > -1e30 for lp in s.output_logprobs) for s in tiny)  # finite logprobs, no overflow


def test_an_engine_that_is_down_is_named():
    client = EngineClient(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(EngineUnavailableError, match="unreachable"):
        client.generate([[1, 2, 3]], SamplingParams(max_new_tokens=1))


def test_the_training_batch_holds_exactly_the_engine_ids_and_logprobs(engine, tokenizer):
    """TITO: what the trainer trains on is the engine's token ids, never a decode/re-tokenize round trip."""
    batch = prompts(tokenizer, (34, 9))
    samples = engine.generate(batch, SamplingParams(temperature=1.0, max_new_tokens=10, ignore_eos=True, sampling_seed=3))
    training = train_batch(samples, tokenizer.pad_token_id)
    for row, sample in enumerate(samples):
        length = len(sample.prompt_ids) + len(sample.output_ids)
        assert training.input_ids[row, :length].tolist() == sample.prompt_ids + sample.output_ids
        targets = training.response_mask[row].bool()
        assert training.input_ids[row, 1:][targets].tolist() == sample.output_ids
        assert torch.equal(training.logp_infer[row][targets], torch.tensor(sample.output_logprobs))
    # Why it matters: random ids decoded to text and re-tokenized come back as other ids.
    text = tokenizer.decode(samples[0].output_ids, skip_special_tokens=False)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] != samples[0].output_ids


def test_concurrent_requests_are_batched_and_each_gets_its_own_completion(engine, tokenizer):
    from concurrent.futures import ThreadPoolExecutor

    batch = prompts(tokenizer, (12, 30, 7, 41, 19, 25), seed=4)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10, ignore_eos=True)
    alone = [engine.generate([p], greedy)[0] for p in batch]
    with ThreadPoolExecutor(len(batch)) as pool:  # arrive together: the engine merges them
        together = list(pool.map(lambda p: engine.generate([p], greedy)[0], batch))
    for one, merged in zip(alone, together, strict=True):
        assert merged.prompt_ids == one.prompt_ids and merged.output_ids == one.output_ids
        assert torch.allclose(torch.tensor(merged.output_logprobs), torch.tensor(one.output_logprobs), atol=1e-4)


def test_requests_past_the_engines_concurrency_are_429s(checkpoints, tmp_path):
    process = EngineProcess(str(checkpoints[0]), tmp_path / "engine.log")
    process.service.args += ["--max-in-flight", "1"]
    client = process.start()
    body = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    try:
        with ThreadPoolExecutor(4) as pool:
            statuses = sorted(pool.map(lambda _: requests.post(f"{client.base_url}/generate", json=body, timeout=60),
                                       range(4)), key=lambda r: r.status_code)
    finally:
        process.stop()
    assert statuses[0].status_code == 200
    busy = [r for r in statuses if r.status_code == 429]
    assert busy and "at most 1 at once (--max-in-flight)" in busy[0].text
