"""Held-out evaluation: scoring on known generated texts, tool episodes driven by scripted turns
through the same loop a model drives, and an untrained glm5-tiny end to end to an eval@1 file."""

import pytest

from data_contracts import EVAL_V1, read_parquet, write_parquet
from data_contracts.conversation import messages_from_records
from model import special_tokens as st
from model.presets import build_model
from model.renderer import tool_call_text
from model.turns import score_turn
from stages.evaluation.arith_accuracy import score_arith
from stages.evaluation.evaluate import evaluate, evaluate_with
from stages.evaluation.generation import greedy_generator
from stages.evaluation.prompts import Prompt
from stages.evaluation.report import eval_rows
from suites import arith
from suites.prepare import SuiteSizes, split_seed, suite_splits
from suites.search_tools import matches_graph, split_graph

SEED = 0


@pytest.fixture(scope="module")
def arith_rows():
    return suite_splits("arith", SuiteSizes(train=20, test=12), SEED)["test"]


@pytest.fixture(scope="module")
def search_rows():
    return suite_splits("search", SuiteSizes(train=20, test=8), SEED)["test"]


# --- one turn ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,thinking,valid,compliant",
    [
        ("4 + 3 = 7</think>The answer is 7.<|user|>", True, True, True),
        ("The answer is 7.<|user|>", False, True, True),
        ("The answer is 7.<|endoftext|>", False, True, True),
        ("The answer is 7.", False, False, True),  # cut off by max_new_tokens: never stopped
        ("4 + 3 = 7 and so on", True, False, False),  # reasoning never closed
        ("</think>The answer is 7.<|user|>", True, True, False),  # closed but empty
        ("<think>4 + 3 = 7</think>The answer is 7.<|user|>", False, True, False),  # thought when told not to
        ("</think>The answer is 7.<|user|>", False, True, False),
        ("reasoning</think><|user|>", True, False, True),  # says nothing
        ("r</think><tool_call>open<arg_key>title</arg_key></tool_call><|observation|>", True, False, True),
    ],
)
def test_turn_format_validity_and_thinking_compliance(text, thinking, valid, compliant):
    score = score_turn(text, thinking)
    assert (score.format_valid, score.thinking_compliant) == (valid, compliant)


@pytest.mark.parametrize(
    "text,correct,format_valid",
    [
        ("4 + 3 = 7</think>The answer is 7.<|user|>", True, True),
        ("4 + 3 = 8</think>The answer is 8.<|user|>", False, True),
        ("7</think>The answer is seven.<|user|>", False, False),
        ("7</think>It is 7.<|user|>", False, False),
        ("7</think>The answer is 7. Easy.<|user|>", False, False),
        ("7</think>The answer is 7.", True, False),  # the right answer, but generation never stopped
        (f"7</think>The answer is 7.{tool_call_text({'name': 'calc', 'arguments': {}})}<|observation|>", True, False),
    ],
)
def test_arith_scoring(text, correct, format_valid):
    result = score_arith("arith-x", 7, 2, text, thinking=True)
    assert (result.correct, result.format_valid) == (correct, format_valid)


# --- arith through evaluate_with --------------------------------------------------------------


def arith_script(rows, wrong_when_thinking_off=False):
    """Answers every problem from its row, in the requested thinking mode; records what it was asked."""
    answers = {row["messages"][0]["content"]: row["messages"][-1]["content"] for row in rows}
    asked: list[Prompt] = []

    def generate(prompts):
        asked.extend(prompts)
        texts = []
        for prompt in prompts:
            reply = answers[prompt.messages[-1]["content"]]
            if prompt.enable_thinking:
                texts.append(f"Working it out.</think>{reply}{st.USER}")
            else:
                texts.append(("The answer is 0." if wrong_when_thinking_off else reply) + st.ENDOFTEXT)
        return texts

    return generate, asked


def test_correct_answers_score_one_and_every_problem_is_asked_in_both_modes(arith_rows):
    generate, asked = arith_script(arith_rows)
    report = evaluate_with(generate, {"arith": arith_rows}, seed=SEED, batch_size=5)
    assert [prompt.enable_thinking for prompt in asked] == [True, False] * len(arith_rows)
    assert [prompt.messages for prompt in asked[::2]] == [prompt.messages for prompt in asked[1::2]]
    assert all([m["role"] for m in prompt.messages] == ["user"] for prompt in asked)
    for metric in ("arith/accuracy", "arith/format_validity", "arith/thinking_compliance",
                   "format_validity", "thinking_compliance"):
        assert report.metrics[metric] == 1.0, metric
    assert report.counts["arith/accuracy"] == len(arith_rows)
    assert "search/success" not in report.metrics  # nothing to average, so no NaN row either


def test_wrong_answers_count_against_their_thinking_mode(arith_rows):
    generate, _ = arith_script(arith_rows, wrong_when_thinking_off=True)
    report = evaluate_with(generate, {"arith": arith_rows}, seed=SEED, limit_per_suite=10, batch_size=4)
    assert report.metrics["arith/accuracy"] == 1.0  # the thinking-on answers
    assert report.metrics["arith/accuracy_thinking_off"] == 0.0
    assert report.metrics["arith/format_validity"] == 1.0
    assert report.counts["arith/accuracy"] == report.counts["arith/accuracy_thinking_off"] == 10


def test_accuracy_by_level_counts_the_operations_each_problem_asks_for(arith_rows):
    generated = {problem.id: problem.level for problem in arith.generate(200, split_seed(SEED, "test"))}
    levels = {row["id"]: generated[row["id"]] for row in arith_rows}
    generate, _ = arith_script(arith_rows)
    report = evaluate_with(generate, {"arith": arith_rows}, seed=SEED, batch_size=8)
    assert {r.id: r.level for r in report.arith} == levels
    for level in set(levels.values()):
        assert report.metrics[f"arith/accuracy_level_{level}"] == 1.0
        assert report.counts[f"arith/accuracy_level_{level}"] == sum(v == level for v in levels.values())


# --- search episodes through evaluate_with ----------------------------------------------------


def generated_text(message: dict) -> str:
    """An assistant message as a model following the format would generate it after `<think>`."""
    calls = "".join(tool_call_text(call) for call in message.get("tool_calls") or [])
    stop = st.OBSERVATION if calls else st.USER
    return f"{message['reasoning_content']}{st.THINK_CLOSE}{message['content']}{calls}{stop}"


def replay_script(rows, final_reply=None):
    """Plays each row's reference trajectory turn by turn, optionally replacing the final reply."""
    trajectories = {}
    for row in rows:
        messages = messages_from_records(row["messages"])
        trajectories[messages[0]["content"]] = [m for m in messages if m["role"] == "assistant"]

    def generate(prompts):
        texts = []
        for prompt in prompts:
            assert prompt.enable_thinking and prompt.tools
            turns = trajectories[prompt.messages[0]["content"]]
            turn = turns[sum(m["role"] == "assistant" for m in prompt.messages)]
            if turn is turns[-1] and final_reply is not None:
                turn = {**turn, "content": final_reply}
            texts.append(generated_text(turn))
        return texts

    return generate


def test_replaying_the_reference_trajectories_succeeds_on_the_rebuilt_graph(search_rows):
    assert any(m["error"] for row in search_rows for m in row["messages"])  # recovery from a bad call is covered
    report = evaluate_with(replay_script(search_rows), {"search": search_rows}, seed=SEED, batch_size=3)
    assert report.metrics["search/success"] == 1.0
    assert report.metrics["search/format_validity"] == 1.0
    assert report.metrics["search/thinking_compliance"] == 1.0
    assert report.counts["search/success"] == len(search_rows)
    for episode, row in zip(report.search, search_rows, strict=True):
        # The tool results the loop fed back are the ones the reference conversation recorded.
        observed = [m["content"] for m in episode.messages if m["role"] == "tool"]
        assert observed == [m["content"] for m in row["messages"] if m["role"] == "tool"]


def test_a_wrong_city_fails(search_rows):
    report = evaluate_with(
        replay_script(search_rows, final_reply="The answer is Nowhere City."), {"search": search_rows}, seed=SEED
    )
    assert report.metrics["search/success"] == 0.0
    assert report.metrics["search/format_validity"] == 1.0


def test_answering_unknown_succeeds_only_where_the_graph_has_no_such_company(search_rows):
    give_up = "Search for the company.</think>" + tool_call_text({"name": "search", "arguments": {"query": "Nix Corp"}})
    unknown = "No page matches the company.</think>The answer is unknown.<|user|>"
    report = evaluate_with(
        lambda prompts: [unknown if len(p.messages) > 1 else give_up + st.OBSERVATION for p in prompts],
        {"search": search_rows}, seed=SEED,
    )
    expected_unknown = [row["messages"][-1]["content"] == "The answer is unknown." for row in search_rows]
    assert 0 < sum(expected_unknown) < len(search_rows)
    assert [episode.success for episode in report.search] == expected_unknown
    assert report.metrics["search/success"] == sum(expected_unknown) / len(search_rows)
    assert report.metrics["search/success_answerable"] == 0.0
    assert report.counts["search/success_answerable"] == len(search_rows) - sum(expected_unknown)


def test_an_agent_that_never_answers_stops_at_the_turn_limit(search_rows):
    loop = "Search again.</think>" + tool_call_text({"name": "search", "arguments": {"query": "Corp"}}) + st.OBSERVATION
    report = evaluate_with(lambda prompts: [loop] * len(prompts), {"search": search_rows[:3]}, seed=SEED, max_turns=4)
    assert [len(episode.turns) for episode in report.search] == [4, 4, 4]
    assert report.metrics["search/success"] == 0.0


def test_a_malformed_call_ends_the_episode(search_rows):
    broken = "Open it.</think><tool_call>open<arg_key>title</arg_key></tool_call><|observation|>"
    report = evaluate_with(lambda prompts: [broken] * len(prompts), {"search": search_rows[:2]}, seed=SEED)
    assert [len(episode.turns) for episode in report.search] == [1, 1]
    assert report.metrics["search/format_validity"] == 0.0 and report.metrics["search/success"] == 0.0


def test_unknown_tools_and_arguments_get_error_observations(search_rows):
    calls = [{"name": "browse", "arguments": {"url": "x"}}, {"name": "open", "arguments": {"page": "x"}}]
    first = "Try.</think>" + "".join(tool_call_text(c) for c in calls) + st.OBSERVATION
    final = "Give up.</think>The answer is Nowhere City.<|user|>"
    report = evaluate_with(
        lambda prompts: [final if len(p.messages) > 1 else first for p in prompts], {"search": search_rows[:1]},
        seed=SEED,
    )
    observations = [m["content"] for m in report.search[0].messages if m["role"] == "tool"]
    assert observations == ["Error: unknown tool 'browse'.", "Error: open takes exactly one argument, 'title'."]


def test_the_graph_seed_follows_the_split_convention_and_a_wrong_seed_is_refused(search_rows):
    train_rows = suite_splits("search", SuiteSizes(train=5, test=1), SEED)["train"]
    assert all(matches_graph(row, split_graph(SEED, "test")) for row in search_rows)
    assert all(matches_graph(row, split_graph(SEED, "train")) for row in train_rows)
    assert not all(matches_graph(row, split_graph(SEED, "train")) for row in search_rows)
    with pytest.raises(ValueError, match="seed 1"):
        evaluate_with(replay_script(search_rows), {"search": search_rows}, seed=1)


def test_unknown_suites_are_refused(arith_rows):
    with pytest.raises(ValueError, match="instruct"):
        evaluate_with(lambda prompts: [], {"instruct": arith_rows}, seed=SEED)


# --- a real model -----------------------------------------------------------------------------


def test_untrained_model_end_to_end_to_an_eval_parquet(tokenizer, arith_rows, search_rows, tmp_path):
    model = build_model("glm5-tiny", tokenizer, seed=SEED)
    model.train()
    suites = {"arith": arith_rows, "search": search_rows}
    report = evaluate(
        model, tokenizer, suites, seed=SEED, limit_per_suite=4, batch_size=4, max_new_tokens=8, max_turns=2
    )
    assert model.training  # handed back the way it came
    assert report.metrics["arith/accuracy"] == 0.0
    assert report.counts["arith/accuracy"] == 4 and report.counts["search/success"] == 4
    assert set(report.metrics) >= {
        "arith/accuracy", "arith/format_validity", "arith/thinking_compliance", "search/success",
        "search/format_validity", "format_validity", "thinking_compliance",
    }
    assert all(0.0 <= value <= 1.0 for value in report.metrics.values())

    rows = eval_rows(report, "file:///checkpoints/init", "test")
    path = tmp_path / "eval.parquet"
    assert write_parquet(EVAL_V1, rows, path) == len(report.metrics)
    table = read_parquet(EVAL_V1, path).to_pylist()
    assert {(r["suite"], r["metric"]) for r in table} >= {("arith", "accuracy"), ("all", "format_validity")}
    assert all(r["split"] == "test" and r["checkpoint_uri"] == "file:///checkpoints/init" for r in table)


def test_batched_generation_matches_one_prompt_at_a_time(tokenizer, arith_rows):
    model = build_model("glm5-tiny", tokenizer, seed=SEED).eval()
    prompts = [Prompt(({"role": "user", "content": row["messages"][0]["content"]},), None, i % 2 == 0)
               for i, row in enumerate(arith_rows[:4])]
    generate = greedy_generator(model, tokenizer, max_new_tokens=8)
    # DSA's top-k breaks ties by key position, which padding shifts; under index_topk keys it selects every
    # key, so what this compares is the padding, masking and positions of the batch.
    longest = max(len(tokenizer.apply_chat_template(list(p.messages), add_generation_prompt=True)) for p in prompts)
    assert longest + 8 <= model.config.index_topk
    batched = generate(prompts)
    assert len({len(p.messages[0]["content"]) for p in prompts}) > 1  # really padded
    assert batched == [generate([prompt])[0] for prompt in prompts]
    assert all(text for text in batched)
    assert generate(prompts) == batched  # greedy: deterministic
