"""The one engine provider (rollout/engines.py): a started engine is a fleet of one, running engines are
made to serve the checkpoint asked for, and settings that name two sources are refused."""

from contextlib import ExitStack

import pytest
from pydantic import ValidationError

from rollout.client import EngineClient
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from rollout.protocol import SamplingParams
from tests.test_rollout_engine import save_checkpoint

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


def test_a_started_engine_and_running_ones_are_one_kind_of_fleet(tokenizer, tmp_path):
    first = str(save_checkpoint(tokenizer, tmp_path / "checkpoints" / "a", seed=1))
    second = str(save_checkpoint(tokenizer, tmp_path / "checkpoints" / "b", seed=2))
    prompts = [tokenizer.encode("12+7=")] * 2 + [tokenizer.encode("3*4=")]
    with ExitStack() as stack:
        started = launch_engines(stack, EngineSettings(), first, tmp_path / "started", seed=3,
                                 weights_dirs=[tmp_path / "checkpoints"])()
        assert (started.started, started.routed) == (True, False)
        assert (tmp_path / "started" / "engine-0.log").exists()
        on_first = started.client.generate(prompts, GREEDY)
        # One batched request to the one engine: what its own client gets for the same prompts.
        assert [s.output_ids for s in on_first] == [s.output_ids for s in EngineClient(started.url).generate(prompts, GREEDY)]
        assert started.client.prompt_logprobs(prompts) == EngineClient(started.url).prompt_logprobs(prompts)

        running = launch_engines(stack, EngineSettings(engine_urls=[started.url]), second, tmp_path / "running", seed=3)()
        assert (running.started, running.routed, running.url) == (False, False, started.url)
        assert not (tmp_path / "running").exists()  # nothing started for running engines
        on_second = running.client.generate(prompts, GREEDY)
        assert EngineClient(started.url).health()["weight_version"] == "0"
        assert [s.output_ids for s in on_second] != [s.output_ids for s in on_first]  # it serves the second now

        untouched = launch_engines(stack, EngineSettings(engine_urls=[started.url]), first, tmp_path / "untouched",
                                   seed=3, serve_checkpoint=False)()
        assert [s.output_ids for s in untouched.client.generate(prompts, GREEDY)] == [s.output_ids for s in on_second]


def test_settings_name_one_source_of_running_engines():
    with pytest.raises(ValidationError, match="router_url or engine_urls, not both"):
        EngineSettings(router_url="http://127.0.0.1:1", engine_urls=["http://127.0.0.1:2"])
    with pytest.raises(ValidationError, match="replicas"):
        EngineSettings(replicas=0)
    assert not EngineSettings(replicas=3).running and EngineSettings(router_url="http://127.0.0.1:1").running
