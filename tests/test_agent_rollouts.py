"""Agent rollouts end to end over real HTTP: engine replicas behind the router, task services that
register with the orchestrator, and what happens when a replica or a service dies mid-stage."""

import asyncio
import json
import logging

import pytest

from data_contracts import ROLLOUT_V1
from data_contracts.conversation import messages_from_records
from data_contracts.parquet import write_parquet
from model.presets import build_model
from rollout.envs.catalog import task_class
from rollout.orchestrator import EpisodeSettings, Orchestrator, RolloutSpec
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams
from rollout.router import EngineRouter
from rollout.task_services import TaskServices
from suites.prepare import SuiteSizes, prompt_splits

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=24)
SETTINGS = EpisodeSettings(max_turns=3, max_context=512, keep_recent=1, discard_above=400)


def task_rows(suite, count):
    rows = prompt_splits(suite, SuiteSizes(count, 2), seed=0)["train"][:count]
    return [{"id": r["id"], "messages": messages_from_records(r["messages"]), "reference_answer": r["reference_answer"],
             "metadata": json.loads(r["metadata_json"])} for r in rows]


def specs(count, prefix=""):
    search, calc = task_rows("search", count), task_rows("calc", count)
    out = []
    for i in range(count):
        out.append(RolloutSpec(f"{prefix}s{i}", f"{prefix}gs{i // 2}", "search", search[i]))
        out.append(RolloutSpec(f"{prefix}c{i}", f"{prefix}gc{i // 2}", "calc", calc[i]))
    return out


@pytest.fixture(scope="module")
def checkpoint(tokenizer, tmp_path_factory):
    directory = tmp_path_factory.mktemp("agent-ckpt")
    build_model("glm5-tiny", tokenizer, seed=5).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


class Stack:
    """Engine replicas, and the task services registered with an orchestrator registry."""

    def __init__(self, checkpoint, logs, replicas=2):
        self.engines = [EngineProcess(checkpoint, logs / f"engine-{i}.log", seed=i) for i in range(replicas)]
        for engine in self.engines:
            engine.start()
        self.tasks = TaskServices({"search": 1.0, "calc": 1.0}, logs).start()
        self.registry, self.services = self.tasks.registry, self.tasks.services

    def close(self):
        self.tasks.stop()
        for engine in self.engines:
            engine.stop()


@pytest.fixture
def stack(checkpoint, tmp_path):
    running = Stack(checkpoint, tmp_path)
    yield running
    running.close()


async def play_all(stack, tokenizer, rollout_specs, during=None):
    stack.registry.bind(asyncio.get_running_loop())
    async with EngineRouter([e.url for e in stack.engines]) as router:
        await stack.registry.wait_registered(list(stack.services), timeout_s=30)
        orchestrator = Orchestrator(stack.registry, router, tokenizer, SAMPLING, SETTINGS)
        plays = [asyncio.create_task(orchestrator.play(spec)) for spec in rollout_specs]
        if during is not None:
            await during(router)
        results = await asyncio.gather(*plays)
        await orchestrator.aclose()
        return results, router


def test_rollouts_record_exact_engine_tokens_with_environment_tokens_masked(stack, tokenizer, tmp_path):
    rollout_specs = specs(8)
    results, router = asyncio.run(play_all(stack, tokenizer, rollout_specs))

    assert [r.spec.rollout_id for r in results] == [s.rollout_id for s in rollout_specs]
    assert {r.status for r in results} <= {"ok", "truncated"} and all(r.reward in (0.0, 1.0) for r in results)
    rows = [row for r in results for row in r.rows]
    write_parquet(ROLLOUT_V1, rows, tmp_path / "rollouts.parquet")  # validates every row against rollout@1
    for result in results:
        # Every turn of a rollout went to one replica.
        assert len(set(result.replicas)) == 1 and len(result.replicas) == result.turns
        first = result.rows[0]
        # TITO from the first token: the prompt is the task rendered by the chat template, tools included.
        expected = tokenizer.apply_chat_template(result.spec.row["messages"], tools=task_class(result.spec.task).tools,
                                                 add_generation_prompt=True, enable_thinking=True, tokenize=True)
        assert first["prompt_ids"] == list(expected["input_ids"])
        for row in result.rows:
            masked = [t for t, m in zip(row["response_ids"], row["loss_mask"], strict=True) if m == 0]
            # Environment tokens carry no logprob and are exactly the observation turns.
            assert all(lp == 0.0 for lp, m in zip(row["rollout_logprobs"], row["loss_mask"], strict=True) if m == 0)
            if masked:
                assert tokenizer.decode(masked, skip_special_tokens=False).startswith("<tool_response>")
    assert sum(router.requests.values()) == sum(r.turns for r in results)


def test_a_replica_killed_mid_stage_loses_no_rollout_and_the_router_logs_it(stack, tokenizer, caplog):
    caplog.set_level(logging.WARNING, logger="rollout.router")
    first_wave, second_wave = specs(3, prefix="a"), specs(10, prefix="k")
    dead = stack.engines[0].url

    async def two_waves():
        stack.registry.bind(asyncio.get_running_loop())
        async with EngineRouter([e.url for e in stack.engines]) as router:
            await stack.registry.wait_registered(list(stack.services), timeout_s=30)
            orchestrator = Orchestrator(stack.registry, router, tokenizer, SAMPLING, SETTINGS)
            served = await asyncio.gather(*(orchestrator.play(spec) for spec in first_wave))
            plays = [asyncio.create_task(orchestrator.play(spec)) for spec in second_wave]
            # Mid-stage: the replica has answered turns and holds requests of the second wave when it dies.
            while router.in_flight[dead] == 0:
                await asyncio.sleep(0)
            await asyncio.to_thread(stack.engines[0].service.kill)
            results = await asyncio.gather(*plays)
            await orchestrator.aclose()
            return served, results, router

    served, results, router = asyncio.run(two_waves())

    assert router.requests[dead] >= 1 and any(dead in r.replicas for r in served)
    # Ids reconcile: every rollout finished exactly once, with its own samples.
    assert sorted(r.spec.rollout_id for r in results) == sorted(s.rollout_id for s in second_wave)
    sample_ids = [row["sample_id"] for r in served + results for row in r.rows]
    assert len(sample_ids) == len(set(sample_ids))
    assert {r.status for r in results} <= {"ok", "truncated"}
    assert router.removals == 1 and dead not in router.load()
    log = caplog.text
    assert f"removed replica {dead}" in log
    # It died holding requests: they were asked again on the survivor.
    assert router.retries >= 1 and "retrying rollout" in log
    # Nothing reached the dead replica after it was removed: later turns all went to the survivor.
    moved = [r for r in results if dead in r.replicas and r.replicas[-1] != dead]
    assert all(r.replicas[r.replicas.index(dead):].count(dead) == r.replicas.count(dead) for r in moved)
    assert all(dead not in r.replicas for r in results if r.replicas and r.replicas[0] != dead)


def test_a_task_service_killed_mid_episode_fails_its_rollouts_as_environment_errors(stack, tokenizer):
    rollout_specs = specs(8, prefix="e")

    async def kill_search(router):
        while sum(router.requests.values()) < 6:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(stack.services["search"].kill)

    results, _ = asyncio.run(play_all(stack, tokenizer, rollout_specs, kill_search))
    failed = [r for r in results if r.status == "env_error"]
    assert failed and all(r.spec.task == "search" for r in failed)
    # Not the model's failure: no reward, and the cause is named.
    assert all(r.reward is None and "unreachable" in r.failure for r in failed)
    assert all(r.status in ("ok", "truncated") for r in results if r.spec.task == "calc")


def test_task_shares_and_concurrency_change_while_running(stack, tokenizer):
    registry = stack.registry

    async def both_registered():  # services register as they come up; shares apply to registered tasks
        registry.bind(asyncio.get_running_loop())
        await registry.wait_registered(list(stack.services), timeout_s=30)

    asyncio.run(both_registered())
    registry.update("calc", share=3.0)
    assert [registry.next_task() for _ in range(8)].count("calc") == 6
    registry.update("calc", share=1.0)
    peak = {"calc": 0}

    async def narrow_calc(router):
        registry.update("calc", concurrency=1)
        while any(not t.done() for t in asyncio.all_tasks() if t.get_coro().__name__ == "play"):
            peak["calc"] = max(peak["calc"], registry.entries["calc"].running)
            await asyncio.sleep(0.005)

    results, _ = asyncio.run(play_all(stack, tokenizer, specs(4, prefix="p"), narrow_calc))
    assert len(results) == 8 and peak["calc"] <= 1
