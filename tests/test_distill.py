"""The distillation job end to end on the tiny model: teachers on their own engines, lineage with teacher parents."""

import tempfile
from pathlib import Path

import pytest

from data_prep.prepare import publish_prompts, publish_suite
from flows.spec import parse_spec
from flows.stage_inputs import PipelineRun, flow_inputs, stage_evals
from flows.stage_table import BY_NAME
from flows.teacher_domains import check_teacher_sources, domain_metrics, headline
from infra.rollouts import recorded_shards
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.distill.config import DistillConfig, TeacherSpec
from stages.distill.data import teacher_prompts
from stages.evaluation.committed import evaluate_checkpoint
from suites.prepare import SuiteSizes
from tests.sft_fixtures import run_sft, small_config
from tests.stage_jobs import run_stage_job


@pytest.fixture(scope="module")
def sft_checkpoint(small_store, tmp_path_factory):
    """A checkpoint that differs from the initial one: a teacher whose logprobs are not the student's."""
    config = small_config(small_store, "distill-teacher", max_steps=6)
    run_sft(config, tmp_path_factory.mktemp("teacher"))
    return open_store(small_store["root"]).open(config.output_name).uri


def test_each_prompt_is_scored_by_its_own_teacher_and_every_teacher_is_a_parent(small_store, sft_checkpoint, tmp_path,
                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        instruct, _ = publish_prompts(store, "instruct", SuiteSizes(24, 8), 0, Path(workdir), "tests")
    arith = next(uri for uri in small_store["datasets"] if "/arith-" in uri)
    agent_sets = sorted(uri for uri in small_store["datasets"] if "/calc-" in uri or "/search-" in uri)
    # The reasoning and agentic teachers are the student itself: on their prompts log π_teacher =
    # log π_student, so the advantage (and the KL) is 0 up to float error, which checks that the prefill
    # lines up with what was sampled, across an episode's turns too; the general teacher is another model.
    # The student samples on two replicas behind SGLang's router (the pipeline's smoke run covers one engine).
    teachers = [TeacherSpec(source="reasoning_rl", checkpoint=small_store["init"], datasets=[arith]),
                TeacherSpec(source="agentic_rl", checkpoint=small_store["init"], datasets=agent_sets,
                            agent_tasks=["calc", "search"]),
                TeacherSpec(source="general_rl", checkpoint=sft_checkpoint, datasets=[instruct.uri])]
    config = DistillConfig(run_id="distill-steps", store=small_store["root"], init_checkpoint=small_store["init"],
                           teachers=teachers, prompts_per_step=4, max_steps=2, sampling={"max_new_tokens": 12},
                           optimizer={"lr": 2e-5, "warmup_steps": 1}, routing_replay=True,
                           # Speculating with the MTP layer's drafts: the logprobs and experts stay the model's own.
                           engines={"replicas": 2, "speculative_steps": 2})
    events = run_stage_job("stages.distill.train", config, tmp_path)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2]
    assert abs(steps[0]["kl/reasoning_rl"]) < 1e-3 and abs(steps[0]["kl/agentic_rl"]) < 1e-3
    # 4 prompts a step in the cycle reasoning, agentic, general: one of them an agent episode, played whole.
    assert all(s["episodes"] == 1 and s["episode_turns"] >= 1 and s["env_failures"] == 0 for s in steps)
    assert steps[0]["kl/general_rl"] > 0.01  # 6 SFT steps apart: a small but real gap
    assert all(s["trained_tokens"] > 0 and s["pop_masked_fraction"] == 0.0 for s in steps)
    # Replaying the student engine's experts (replies and every episode turn, past the router): the trainer's own
    # routing, measured under replay too, is the engine's (on-policy, the same weights in fp32).
    assert all(s["routing_agreement"] >= 0.99 for s in steps)
    # Over replies and episode turns: 1 + the drafts that stood per step.
    assert all(1.0 <= s["spec_accept_length"] <= 3.0 for s in steps)

    lineage = store.open(config.output_name).lineage()
    assert [(p["role"], p["uri"]) for p in lineage["parents"]] == [
        ("init", small_store["init"]), ("teacher", small_store["init"]), ("teacher", small_store["init"]),
        ("teacher", sft_checkpoint)]
    assert {(i["uri"], i["contract"]) for i in lineage["inputs"] if i["role"] == "data"} == {
        (arith, "chat@1"), *((uri, "chat@1") for uri in agent_sets), (instruct.uri, "prompt@1")}
    # The samples it trained on are on record with the teacher's logprob of every token: where the teacher is
    # the student as it was at step 1, it is the trainer's own logprob of the token (the record is aligned).
    shards = recorded_shards(store.open(config.output_name))
    assert [shard.step for shard in shards] == [1, 2]
    rows = [row for shard in shards for row in shard.table().to_pylist()]
    assert {row["task"] for row in rows} >= {"reasoning_rl", "instruct"} and {"calc", "search"} & {r["task"] for r in rows}
    for row in rows:
        assert row["reward"] is None and row["advantage"] is None and row["staleness"] == 0
        assert row["routed_experts"] is not None
        if row["task"] != "instruct" and row["step"] == 1:
            gaps = [abs(t - o) for t, o, m in zip(row["teacher_logprobs"], row["old_logprobs"], row["loss_mask"], strict=True) if m]
            assert max(gaps) < 1e-3
    done = [e for e in events if e["event"] == "done"]
    assert done[0]["checkpoint"] == store.open(config.output_name).uri


def test_a_teachers_domain_is_judged_by_its_overall_score_where_there_is_one():
    agentic = {"calc/tool_success": 0.03, "env_failures": 0.0, "search/tool_success": 0.17, "tool_success": 0.1}
    assert headline("agentic_rl", agentic) == "tool_success"  # not calc's, which sorts first
    assert headline("reasoning_rl", {"arith/accuracy_greedy": 0.2, "arith/accuracy_sampled": 0.16}) == "arith/accuracy_sampled"


def test_the_sft_checkpoint_teaches_its_chat_data_and_is_judged_as_sft_evaluates_it(small_store, tokenizer, tmp_path):
    """GLM-5's teachers include the final SFT model: the pipeline makes it the teacher of SFT's chat@1
    datasets (conversations that state no answer too: the teacher scores the reply), and its domain is
    measured with SFT's own evaluation (the committed one, read back)."""
    store = open_store(small_store["root"])
    instruct, _ = publish_suite(store, "instruct", SuiteSizes(8, 4), 0, tmp_path, "tests")  # replies state no answer
    sft_datasets = sorted([*small_store["datasets"], instruct.uri])
    sft_eval = {"limit_per_suite": 4, "batch_size": 4, "max_new_tokens": 8, "search_episodes": 2, "max_turns": 2}
    spec = parse_spec({"model": {"preset": "glm5-tiny"},
                       "data": {"suites": {"arith": {}, "search": {}, "calc": {}, "instruct": {}}},
                       "stages": {"sft": {"datasets": ["arith", "search", "calc", "instruct"], "eval": sft_eval},
                                  "reasoning_rl": {"datasets": ["arith"]}, "distill": {"shares": {"sft": 2}}}},
                      "spec.yaml")
    arith = next(uri for uri in small_store["datasets"] if "/arith-" in uri)
    init = small_store["init"]  # stands for the final SFT checkpoint: any committed checkpoint is measured alike
    prepared = {"stages": {"sft": sft_datasets, "reasoning_rl": [arith]}, "init_checkpoint": init}
    run = PipelineRun(spec, prepared, {"init": init, "sft": init, "reasoning_rl": "file:///s/reasoning_rl/x"},
                      stage_evals(spec))
    config, arguments = flow_inputs(BY_NAME["distill"], run)
    assert [teacher.source for teacher in config.teachers] == ["sft", "reasoning_rl"]
    sft_teacher = config.teachers[0]
    assert (sft_teacher.checkpoint, sft_teacher.datasets, sft_teacher.share) == (init, sft_datasets, 2)
    assert config.init_checkpoint == "file:///s/reasoning_rl/x"  # the student: the latest checkpoint
    prompts = teacher_prompts(store, [sft_teacher], tokenizer, tmp_path / "prompts", limit=8, seed=0)["sft"]
    assert {p.id.split("-")[0] for p in prompts} == {"arith", "search", "calc", "instruct"}
    assert all(p.metadata["teacher"] == "sft" for p in prompts)
    assert {p.reference for p in prompts if p.id.startswith("instruct")} == {None}

    settings = arguments["eval_settings"]
    assert settings.sft == spec.stages.sft.eval
    metrics = domain_metrics(store, init, sft_teacher, settings, EngineSettings())
    named = {uri.rsplit("/", 1)[-1].split("-", 1)[0]: uri for uri in sft_datasets}
    assert metrics == evaluate_checkpoint(store, init, named, settings.sft, ("sparse",))["sparse"]
    assert {"arith/accuracy", "search/success"} <= set(metrics) and headline("sft", metrics) == "format_validity"


def test_a_teacher_names_a_stage_that_teaches():
    check_teacher_sources([TeacherSpec(source="sft", checkpoint="c", datasets=["d"])])
    with pytest.raises(ValueError, match=r"teachers\[1\]\.source: 'orm' is not a stage that teaches; one of sft, "):
        check_teacher_sources([TeacherSpec(source="sft", checkpoint="c", datasets=["d"]),
                               TeacherSpec(source="orm", checkpoint="c", datasets=["d"])])
