"""Agent rollouts end to end over real HTTP: engine replicas behind SGLang's router, task services that
register with the orchestrator, and what happens when a replica dies, stops answering for a while, or a
service dies mid-stage."""

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
import requests
import torch
from transformers import AutoModelForCausalLM

from data_contracts import ROLLOUT_V1
from data_contracts.conversation import messages_from_records
from data_contracts.parquet import write_parquet
from model.dsa import install_dsa_indexers, set_dense_attention
from model.presets import build_model, load_model
from model.routing import ReplayedRouting, RoutingLayout
from rollout.agents.envs.catalog import task_class
from rollout.agents.orchestrator import EpisodeSettings, Orchestrator, RolloutSpec
from rollout.agents.task_services import TaskServices
from rollout.agents.trajectory import TrajectoryBuilder
from rollout.fleet import Fleet
from rollout.process import EngineProcess, RouterProcess
from rollout.protocol import SamplingParams
from rollout.weight_push import Broadcast, FleetWeightGroup, FromDisk, weight_payload
from stages.agentic.train import segments_batch
from stages.common.rl_batches import padded_batch, with_routed_experts
from suites.prepare import SuiteSizes, prompt_splits
from tests.faults.processes import wait_for
from tests.unavailable_proxy import UnavailableProxy

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=24)
# Turns long enough that a replica killed mid-stage holds requests it has not answered.
LONG_TURNS = SamplingParams(temperature=1.0, max_new_tokens=64, ignore_eos=True)
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
    """Engine replicas behind SGLang's router (the second through a proxy that can answer 503), and the
    task services registered with an orchestrator registry."""

    def __init__(self, checkpoint, logs, replicas=2):
        # The checkpoint's folder is one the engines may load weight updates from.
        self.engines = [EngineProcess(checkpoint, logs / f"engine-{i}.log", seed=i, weights_dirs=[Path(checkpoint).parent])
                        for i in range(replicas)]
        for engine in self.engines:
            engine.launch()
        self.tasks = TaskServices({"search": 1.0, "calc": 1.0}, logs).start()
        for engine in self.engines:
            engine.wait_ready()
        self.checkpoint = checkpoint
        self.proxy = UnavailableProxy(self.engines[-1].url).__enter__()
        self.worker_urls = [e.url for e in self.engines[:-1]] + [self.proxy.url]
        self.router = RouterProcess(self.worker_urls, logs / "router.log")
        self.router_url = self.router.start()
        self.registry, self.services = self.tasks.registry, self.tasks.services

    def workers(self):
        return {w["url"]: w["is_healthy"] for w in requests.get(f"{self.router_url}/workers", timeout=10).json()["workers"]}

    def close(self):
        self.router.stop()
        self.proxy.__exit__()
        self.tasks.stop()
        for engine in self.engines:
            engine.stop()


@pytest.fixture(scope="module")
def stack(checkpoint, tmp_path_factory):
    """One stack for the tests that leave it as they found it (each engine start is seconds of CPU), in
    file order: the registry's draws first, then a killed replica last."""
    running = Stack(checkpoint, tmp_path_factory.mktemp("stack"))
    yield running
    running.close()


@pytest.fixture
def own_stack(checkpoint, tmp_path):
    running = Stack(checkpoint, tmp_path)
    yield running
    running.close()


async def play_all(stack, tokenizer, rollout_specs, during=None, routed_experts=False):
    stack.registry.bind(asyncio.get_running_loop())
    async with Fleet(stack.router_url) as fleet:
        await stack.registry.wait_registered(list(stack.services), timeout_s=30)
        orchestrator = Orchestrator(stack.registry, fleet, tokenizer, SAMPLING, SETTINGS, routed_experts=routed_experts)
        plays = [asyncio.create_task(orchestrator.play(spec)) for spec in rollout_specs]
        if during is not None:
            await during(fleet)
        results = await asyncio.gather(*plays)
        await orchestrator.aclose()
        return results, fleet


def test_task_shares_and_concurrency_change_while_running(stack, tokenizer):
    registry = stack.registry

    async def both_registered():  # services register as they come up; shares apply to registered tasks
        registry.bind(asyncio.get_running_loop())
        await registry.wait_registered(list(stack.services), timeout_s=30)

    asyncio.run(both_registered())
    registry.update("calc", share=3.0)
    assert [registry.next_task() for _ in range(8)].count("calc") == 6
    registry.update("calc", share=1.0)
    peak, concurrency = {"calc": 0}, registry.entries["calc"].concurrency

    async def narrow_calc(fleet):
        registry.update("calc", concurrency=1)
        while any(not t.done() for t in asyncio.all_tasks() if t.get_coro().__name__ == "play"):
            peak["calc"] = max(peak["calc"], registry.entries["calc"].running)
            await asyncio.sleep(0.005)

    try:
        results, _ = asyncio.run(play_all(stack, tokenizer, specs(4, prefix="p"), narrow_calc))
    finally:
        registry.update("calc", concurrency=concurrency)  # as it was, for the stack's next tests
    assert len(results) == 8 and peak["calc"] <= 1


def test_rollouts_record_exact_engine_tokens_with_environment_tokens_masked(stack, tokenizer, tmp_path):
    rollout_specs = specs(8)
    results, fleet = asyncio.run(play_all(stack, tokenizer, rollout_specs))

    assert [r.spec.rollout_id for r in results] == [s.rollout_id for s in rollout_specs]
    assert {r.status for r in results} <= {"ok", "truncated"} and all(r.reward in (0.0, 1.0) for r in results), \
        [r.failure for r in results if r.failure]
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
    assert sum(fleet.requests.values()) == sum(r.turns for r in results)
    assert set(fleet.requests) == {e.url for e in stack.engines}  # both replicas served, each named by its header


def trainer_agreement(checkpoint, batch) -> float:
    """The share of (position, MoE layer) pairs where the trainer's own routing (fp32, the same weights) picks the
    engine's experts: near 1 where the experts are aligned with their positions, far below where they are not."""
    model = load_model(checkpoint).eval()
    install_dsa_indexers(model)
    set_dense_attention(model, dense=False)
    replayed = ReplayedRouting(model)
    with replayed.replaying(batch.routed_experts, False), torch.no_grad():
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    return replayed.agreement()


def test_turns_asking_for_routed_experts_go_past_the_router_and_each_sample_carries_every_position_s(
        stack, checkpoint, tokenizer, tmp_path):
    """SGLang's router drops return_routed_experts, so those turns go to the replica their rollout hashes to among
    the router's healthy workers; each sample (rollout@1 row) carries the experts of every position but its last."""
    results, fleet = asyncio.run(play_all(stack, tokenizer, specs(8, prefix="r"), routed_experts=True))
    rows = [row for r in results for row in r.rows]
    write_parquet(ROLLOUT_V1, rows, tmp_path / "rollouts.parquet")  # the experts on record, in rollout@1
    for result in results:
        assert len(set(result.replicas)) == 1 and len(result.replicas) == result.turns
    assert set(fleet.requests) == {e.url for e in stack.engines}  # both replicas served, past the router
    done = [r for r in results if r.rows]
    layout = RoutingLayout.of(load_model(checkpoint))
    batch, _ = segments_batch([done], torch.zeros(len(done)), tokenizer.pad_token_id, layout, replay=True)
    known = (batch.routed_experts >= 0).all(dim=-1).all(dim=-1).sum(dim=1)
    assert torch.equal(known, batch.attention_mask.sum(dim=1) - 1)  # every position but the last, each row
    assert trainer_agreement(checkpoint, batch) >= 0.99


def test_a_sample_of_several_turns_puts_its_turns_experts_together_position_by_position(stack, checkpoint, tokenizer):
    """Each turn asks from where the sample's last turn ended (its last sampled token, which this turn runs first),
    the environment's tokens between turns included: the parts cover the sample exactly once, aligned."""
    observation = tokenizer("<tool_response>42</tool_response>", add_special_tokens=False)["input_ids"]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10, ignore_eos=True)

    async def three_turns():
        async with Fleet(stack.router_url) as fleet:
            builder, ids, starts = TrajectoryBuilder(), list(range(30, 52)), []
            for _ in range(3):
                starts.append(builder.routed_from(ids))
                sample = await fleet.generate("several-turns", ids, sampling, starts[-1])
                builder.add_turn(ids, sample)
                ids = ids + sample.output_ids + observation
            return builder, starts

    builder, starts = asyncio.run(three_turns())
    [segment] = builder.segments
    assert len(segment.turn_starts) == 3
    turn_ends = [len(segment.prompt_ids) + start for start in segment.turn_starts[1:]]
    assert starts == [0] + [end - len(observation) - 1 for end in turn_ends]
    layout = RoutingLayout.of(load_model(checkpoint))
    batch = with_routed_experts(padded_batch([(segment.prompt_ids, segment.response_ids, segment.loss_mask,
                                               segment.logprobs)], tokenizer.pad_token_id),
                                [segment.routed_experts], layout)
    assert int((batch.routed_experts >= 0).all(dim=-1).all(dim=-1).sum()) == len(segment.sequence()) - 1
    assert trainer_agreement(checkpoint, batch) >= 0.99


def test_a_replica_answering_503_for_a_while_is_skipped_and_rejoins(stack, tokenizer):
    behind_proxy = stack.engines[-1].url
    results, _ = asyncio.run(play_all(stack, tokenizer, specs(4, prefix="w")))
    assert any(behind_proxy in r.replicas for r in results)  # the proxied replica takes its share

    stack.proxy.unavailable.set()
    deadline = time.monotonic() + 30
    while stack.workers()[stack.proxy.url] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stack.workers()[stack.proxy.url] is False
    during, _ = asyncio.run(play_all(stack, tokenizer, specs(4, prefix="u")))
    assert all(r.status in ("ok", "truncated") for r in during)
    assert all(behind_proxy not in r.replicas for r in during)  # skipped while it answers 503

    stack.proxy.unavailable.clear()
    deadline = time.monotonic() + 30
    while not stack.workers()[stack.proxy.url] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stack.workers()[stack.proxy.url] is True
    after, _ = asyncio.run(play_all(stack, tokenizer, specs(4, prefix="w")))  # the same keys as before it left
    assert any(behind_proxy in r.replicas for r in after) and stack.proxy.refused > 0


@pytest.mark.parametrize("delivery", ["disk", "broadcast"])
def test_a_weight_update_reaches_every_worker_and_a_worker_that_fails_it_leaves_the_router(stack, delivery):
    proxied = stack.proxy.url
    group = FleetWeightGroup("gloo", timeout_s=60)
    tensors = list(AutoModelForCausalLM.from_pretrained(stack.checkpoint).state_dict().items())

    def weights(version):
        return FromDisk(stack.checkpoint, version) if delivery == "disk" else Broadcast(group, weight_payload(tensors, version))

    async def update(version):
        async with Fleet(stack.router_url) as fleet:
            await fleet.update_weights(weights(version))
            return fleet

    fleet = asyncio.run(update("3"))
    assert fleet.removals == 0 and all(health(e.url)["weight_version"] == "3" for e in stack.engines)

    stack.proxy.unavailable.set()  # it fails the next update before the router's health check notices
    fleet = asyncio.run(update("4"))
    assert fleet.removals == 1 and proxied not in stack.workers() and fleet.parked == []
    assert health(stack.engines[0].url)["weight_version"] == "4"

    # A worker the router already saw unhealthy is parked at a push, and put back with the weights once it answers.
    stack.proxy.unavailable.clear()
    requests.post(f"{stack.router_url}/workers", json={"url": proxied}, timeout=10)
    wait_until(lambda: stack.workers().get(proxied) is True)
    stack.proxy.unavailable.set()
    wait_until(lambda: stack.workers().get(proxied) is False)

    async def park_then_readmit():
        async with Fleet(stack.router_url) as fleet:
            await fleet.update_weights(weights("5"))
            parked = list(fleet.parked)
            stack.proxy.unavailable.clear()
            await fleet.update_weights(weights("6"))
            return fleet, parked

    fleet, parked = asyncio.run(park_then_readmit())
    group.close()
    assert parked == [proxied] and fleet.readmissions == 1 and fleet.parked == []
    wait_until(lambda: stack.workers().get(proxied) is True)
    assert [health(e.url)["weight_version"] for e in stack.engines] == ["6", "6"]


def test_a_replica_killed_mid_stage_loses_no_rollout_and_the_router_takes_it_out(stack, tokenizer, caplog):
    # The last of the shared stack's tests: its first replica stays dead.
    caplog.set_level(logging.WARNING, logger="rollout.fleet")
    second_wave = []
    dead = stack.engines[0].url
    retries_before = router_metric(stack, "smg_worker_retries_total")  # the stack's earlier tests' count too

    async def two_waves():
        stack.registry.bind(asyncio.get_running_loop())
        async with Fleet(stack.router_url) as fleet:
            await stack.registry.wait_registered(list(stack.services), timeout_s=30)
            orchestrator = Orchestrator(stack.registry, fleet, tokenizer, LONG_TURNS, SETTINGS)
            # Before the kill, waves of six until the replica has served a whole rollout (the router places each
            # by its load, so one wave may all go to the other replica).
            served = []
            while not any(dead in r.replicas for r in served):
                assert len(served) < 24, "the replica to kill served none of 24 rollouts"
                served += await asyncio.gather(*(orchestrator.play(spec) for spec in specs(3, prefix=f"a{len(served)}-")))
            plays, deadline = [], time.monotonic() + 120
            # Mid-stage: the replica has answered turns of the second wave and holds a request when it dies (else
            # the router has nothing to ask again: a kill between two of its requests retried nothing, under load).
            # A wave that ends before the replica is seen holding one is followed by another, so the wait is bounded.
            while True:
                if all(play.done() for play in plays):
                    wave = specs(10, prefix=f"k{len(second_wave)}-")
                    second_wave.extend(wave)
                    before = sum(fleet.requests.values())
                    plays += [asyncio.create_task(orchestrator.play(spec)) for spec in wave]
                answered = sum(fleet.requests.values()) >= before + 2
                if answered and (await asyncio.to_thread(health, dead))["in_flight"] >= 1:
                    break
                assert time.monotonic() < deadline, "the replica was never seen holding a request mid-wave"
                await asyncio.sleep(0.01)
            await asyncio.to_thread(stack.engines[0].service.kill)
            at_kill = fleet.requests[dead], sum(fleet.requests.values())
            results = await asyncio.gather(*plays)
            await orchestrator.aclose()
            return served, results, fleet, at_kill

    served, results, fleet, (dead_answers, all_answers) = asyncio.run(two_waves())

    assert any(dead in r.replicas for r in served)
    # Ids reconcile: every rollout finished exactly once, with its own samples.
    assert sorted(r.spec.rollout_id for r in results) == sorted(s.rollout_id for s in second_wave)
    sample_ids = [row["sample_id"] for r in served + results for row in r.rows]
    assert len(sample_ids) == len(set(sample_ids))
    assert sum(len(r.rows) for r in results) == sum(r.turns for r in results)  # one sample per turn answered
    assert {r.status for r in results} <= {"ok", "truncated"}, [r.failure for r in results if r.failure]
    # It died holding requests: SGLang's router asked them again of the survivor, which answered every
    # turn after the kill.
    assert router_metric(stack, "smg_worker_retries_total") > retries_before
    assert fleet.requests[dead] == dead_answers and sum(fleet.requests.values()) > all_answers
    # SGLang's router's health check takes it out of rotation: two failed checks a second apart, which can end
    # after the last rollout did.
    wait_for(lambda: stack.workers()[dead] is False, 10, "the router marking the killed replica unhealthy", poll_s=0.2)


def test_turns_past_the_router_move_to_a_live_replica_when_theirs_dies(own_stack, tokenizer):
    """The router does not retry what does not go through it: a turn asking for routed experts whose replica dies
    is asked again of the one it hashes to among the workers the router still lists as healthy."""
    dead = own_stack.engines[0].url

    async def killed_mid_wave():
        own_stack.registry.bind(asyncio.get_running_loop())
        async with Fleet(own_stack.router_url) as fleet:
            await own_stack.registry.wait_registered(list(own_stack.services), timeout_s=30)
            orchestrator = Orchestrator(own_stack.registry, fleet, tokenizer, LONG_TURNS, SETTINGS, routed_experts=True)
            plays = [asyncio.create_task(orchestrator.play(spec)) for spec in specs(6, prefix="d")]
            deadline = time.monotonic() + 120
            while (await asyncio.to_thread(health, dead))["in_flight"] < 1:
                assert time.monotonic() < deadline and not all(play.done() for play in plays), \
                    "the replica was never seen holding a request"
                await asyncio.sleep(0.01)
            await asyncio.to_thread(own_stack.engines[0].service.kill)
            results = await asyncio.gather(*plays)
            await orchestrator.aclose()
            return results, fleet

    results, fleet = asyncio.run(killed_mid_wave())
    assert {r.status for r in results} <= {"ok", "truncated"}, [r.failure for r in results if r.failure]
    # Its turns in flight were asked again, of the survivor, which answered every turn after the kill.
    assert fleet.retries > 0 and all(r.replicas and r.replicas[-1] != dead for r in results)
    assert all(row["routed_experts"] is not None for r in results for row in r.rows)


def wait_until(condition, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def health(url: str) -> dict:
    return requests.get(f"{url}/health", timeout=10).json()


def router_metric(stack, name: str) -> float:
    """A counter from SGLang's router's Prometheus endpoint, summed over its labels."""
    lines = requests.get(stack.router.metrics_url, timeout=10).text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def test_a_task_service_killed_mid_episode_fails_its_rollouts_as_environment_errors(own_stack, tokenizer):
    rollout_specs = specs(8, prefix="e")

    async def kill_search(fleet):
        while sum(fleet.requests.values()) < 6:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(own_stack.services["search"].kill)

    results, _ = asyncio.run(play_all(own_stack, tokenizer, rollout_specs, kill_search))
    failed = [r for r in results if r.status == "env_error"]
    assert failed and all(r.spec.task == "search" for r in failed)
    # Not the model's failure: no reward, and the cause is named.
    assert all(r.reward is None and "unreachable" in r.failure for r in failed)
    assert all(r.status in ("ok", "truncated") for r in results if r.spec.task == "calc")
