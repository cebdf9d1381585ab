"""A pipeline run's engine pool (flows/engine_pool.py) with real engines: one start per need, switched by weight
updates, kept for what later stages read, stopped when nothing does, every start on the run's ledger."""

import requests
import torch

from flows.engine_pool import engine_pool, leased_engines, scratch_root
from model.device import resolved_precision
from model.dsa import set_dense_attention
from model.logprobs import next_token_logprobs
from model.presets import build_model, load_model
from rollout.client import EngineClient
from rollout.engine_settings import EngineSettings
from rollout.engine_starts import engine_starts, recording_engine_starts

IDS = [5, 17, 230, 41, 99, 12, 8, 310]


def saved(tokenizer, name: str, seed: int) -> str:
    # Under the run's scratch root, which pooled engines may load from (as a stage's disk pushes).
    directory = scratch_root() / "pool-test" / name
    build_model("glm5-tiny", tokenizer, seed=seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@torch.no_grad()
def expected(checkpoint: str) -> list[float]:
    model = load_model(checkpoint).eval()
    set_dense_attention(model, False)
    return next_token_logprobs(model(torch.tensor([IDS])).logits, torch.tensor([IDS]))[0].tolist()


def answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def serves(url: str, checkpoint: str) -> bool:
    served = EngineClient(url).prompt_logprobs([IDS])[0][1:]
    return max(abs(a - b) for a, b in zip(served, expected(checkpoint), strict=True)) < 1e-4


def test_the_pool_starts_an_engine_once_per_need_and_keeps_what_later_stages_read(tokenizer, tmp_path):
    a, b = saved(tokenizer, "a", 1), saved(tokenizer, "b", 2)
    ledger = tmp_path / "engine-starts.jsonl"
    with recording_engine_starts(ledger), engine_pool(tmp_path / "engines", seed=0) as pool:
        first = pool.lease(a, exclusive=False)
        # Two evaluations of one checkpoint share it, whether they name the dtype served or leave it `auto`.
        assert pool.lease(a, exclusive=False, precision=resolved_precision("auto")) == first
        pool.release(first)
        pool.release(first)
        assert serves(first, a)
        # Idle, and nothing later reads a: the same engine is made to serve b, by an update.
        with leased_engines(b, exclusive=False) as settings:
            assert settings.engine_urls == [first] and serves(first, b)
        # A later stage reads b: a policy engine on a is another engine, and leaves b's alone.
        pool.keep_only(now={a}, later={b})
        policy = pool.lease(a, exclusive=True)
        assert policy != first and serves(policy, a)
        assert pool.lease(b, exclusive=False) == first
        pool.release(first)
        EngineClient(policy).update_weights(b)  # as a trainer's pushes would: what it serves is no longer a
        pool.release(policy)
        # Released by its trainer, the policy engine serves what the pool does not know: read again, it is
        # loaded from the store first (b's engine is still kept for the later stage).
        again = pool.lease(a, exclusive=False)
        assert again == policy and serves(again, a)
        pool.release(again)
        # A stage that decodes speculatively gets an engine that does (another, though a is served already).
        drafting = pool.lease(a, exclusive=True, decoding=EngineSettings(speculative_steps=2).decoding())
        assert drafting not in (first, policy) and serves(drafting, a)
        pool.release(drafting)
        # Nothing reads b or a any more: one idle engine stays as a spare, the other stops.
        urls = [engine.url for engine in pool.engines]
        pool.keep_only(now=set(), later=set())
        assert len(pool.engines) == 1
        assert sum(answers(url) for url in urls) == 1
    assert not any(answers(url) for url in urls)  # the run's end stops the rest
    starts = engine_starts(ledger)
    assert [start["checkpoint"] for start in starts] == [a, a, a] and all(start["seconds"] > 0 for start in starts)


def test_outside_a_pipeline_nothing_is_leased():
    with leased_engines("file:///anything", exclusive=True) as settings:
        assert settings is None
