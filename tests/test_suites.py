"""The embedded suites: deterministic, held out, contract-valid, correct, and rendered per thinking mode."""

import json
import re
from collections import Counter

import pytest

from data_contracts import CHAT_V1, PREFERENCE_V1, PROMPT_V1, write_parquet
from data_contracts.conversation import messages_from_records
from model.renderer import render
from model.thinking import CHAT_THINKING_MODE, apply_thinking_mode, assign_modes
from model.tool_calls import ToolCall
from rollout.agents.envs.tasks import CalcTask, Episode
from suites import chat, instruct, judge, search
from suites.chat_topics import ANCHORS
from suites.prepare import (
    PREFERENCE_SUITES,
    SUITES,
    SuiteSizes,
    preference_splits,
    prompt_splits,
    suite_splits,
    user_text,
)

SIZES = SuiteSizes(train=300, test=100)
MIX = {"interleaved": 0.5, "preserved": 0.3, "off": 0.2}


def all_splits(seed: int) -> dict:
    """Every kind of row the suites publish, keyed by (what, suite)."""
    produced = {("chat", suite): suite_splits(suite, SIZES, seed, MIX) for suite in SUITES}
    produced |= {("prompt", suite): prompt_splits(suite, SIZES, seed) for suite in SUITES}
    produced |= {("preference", suite): preference_splits(suite, SIZES, seed) for suite in PREFERENCE_SUITES}
    return produced


@pytest.fixture(scope="module")
def produced():
    return all_splits(seed=7)


def test_same_seed_same_rows_other_seed_other_rows(produced):
    again = all_splits(seed=7)
    other = all_splits(seed=8)
    for key, splits in produced.items():
        assert splits == again[key], key
        for split in ("train", "test"):
            assert splits[split] != other[key][split], (key, split)


def test_splits_have_the_requested_sizes(produced):
    for key, splits in produced.items():
        assert (len(splits["train"]), len(splits["test"])) == (SIZES.train, SIZES.test), key


def prompt_messages(kind: str, row: dict) -> list[dict]:
    if kind == "preference":
        return row["prompt"]
    return [message for message in row["messages"] if message["role"] == "user"]


def test_held_out_prompts_never_appear_in_training(produced):
    # search draws both splits from a small name space, so raw draws collide and must be dropped.
    raw_train = {user_text(e.prompt) for e in SUITES["search"]("train", SIZES.train, 7)}
    assert any(user_text(e.prompt) in raw_train for e in SUITES["search"]("test", SIZES.test, 7))
    for (kind, suite), splits in produced.items():
        train = {user_text(prompt_messages(kind, row)) for row in splits["train"]}
        test = {user_text(prompt_messages(kind, row)) for row in splits["test"]}
        assert not train & test, (kind, suite)


def test_ids_are_unique_across_splits(produced):
    for key, splits in produced.items():
        ids = [row["id"] for split in splits.values() for row in split]
        assert len(ids) == len(set(ids)), key


def test_every_row_validates_under_its_contract(produced, tmp_path):
    contracts = {"chat": CHAT_V1, "prompt": PROMPT_V1, "preference": PREFERENCE_V1}
    for (kind, suite), splits in produced.items():
        for split, rows in splits.items():
            assert write_parquet(contracts[kind], rows, tmp_path / f"{kind}-{suite}-{split}.parquet") == len(rows)


def evaluate(expression: str) -> int:
    assert re.fullmatch(r"[\d\s()+\-*]+", expression), expression
    return eval(expression)  # only digits, parentheses and + - * reach here


def test_arith_answers_are_correct(produced):
    for row in produced[("prompt", "arith")]["train"] + produced[("prompt", "arith")]["test"]:
        metadata = json.loads(row["metadata_json"])
        assert row["messages"][0]["content"] == f"Compute {metadata['expression']}."
        assert int(row["reference_answer"]) == evaluate(metadata["expression"])
    for row in produced[("chat", "arith")]["train"]:
        question, reply = row["messages"][0]["content"], row["messages"][-1]["content"]
        expression = re.fullmatch(r"Compute (.+)\.", question).group(1)
        assert reply == f"The answer is {evaluate(expression)}."


def test_calc_episodes_show_what_the_sandboxed_calculator_answers(produced):
    rows = produced[("chat", "calc")]["train"][:12] + produced[("chat", "calc")]["test"][:12]
    references = {p["id"]: p["reference_answer"] for split in ("train", "test") for p in produced[("prompt", "calc")][split]}
    for row in rows:
        messages = messages_from_records(row["messages"])
        calls = [m for m in messages if m.get("tool_calls")]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        assert len(calls) == len(results) >= 2
        for call, result in zip(calls, results, strict=True):
            # The recorded tool turn is exactly what the calc environment's sandbox prints for the call.
            assert result == CalcTask().execute(ToolCall(**call["tool_calls"][0]), Episode("", {}))
        assert messages[-1]["content"] == f"The answer is {results[-1]}." == f"The answer is {references[row['id']]}."
        # The calls the SFT episode makes are the steps calc's partial credit grades: all of them, in order.
        played = Episode(references[row["id"]], {}, messages[:1], calls=[ToolCall(**c["tool_calls"][0]) for c in calls])
        assert CalcTask().partial_credit(played) == 1.0
    questions = {row["messages"][0]["content"] for row in produced[("chat", "arith")]["train"]}
    assert not questions & {row["messages"][0]["content"] for row in rows}  # calc reads differently from arith


def test_search_answers_follow_from_the_graph(produced):
    for split in ("train", "test"):
        for row in produced[("prompt", "search")][split]:
            metadata = json.loads(row["metadata_json"])
            graph = search.build_graph(metadata["graph_seed"])
            company = re.fullmatch(r"In which city was the founder of (.+) born\?", metadata["question"]).group(1)
            if company in graph.founder_of:
                assert row["reference_answer"] == graph.birthplace_of[graph.founder_of[company]]
            else:
                assert row["reference_answer"] == search.UNKNOWN
                assert graph.search(company) == "No results."
    answers = Counter()
    for row in produced[("chat", "search")]["test"]:
        results = [message["content"] for message in row["messages"] if message["role"] == "tool"]
        if results == ["No results."]:
            answers["unknown"] += 1
            assert row["messages"][-1]["content"] == f"The answer is {search.UNKNOWN}."
            continue
        if results[-1].startswith("Error: no page titled"):  # gave up after two failed opens, both flagged
            answers["gave_up"] += 1
            assert results[-2].startswith("Error: no page titled") and len(results) == 3
            assert [m.get("error", False) for m in row["messages"] if m["role"] == "assistant"] == [False, True, True, False]
            assert row["messages"][-1]["content"] == f"The answer is {search.UNKNOWN}."
            continue
        # The answer is the city on the founder's page, the last page the episode opens.
        city = re.fullmatch(r".+ is an entrepreneur born in (.+)\.", results[-1]).group(1)
        answers["city"] += 1
        assert row["messages"][-1]["content"] == f"The answer is {city}."
    assert answers["unknown"] and answers["gave_up"] and answers["city"] > answers["unknown"] + answers["gave_up"]


def test_instruct_references_meet_their_constraints_and_violations_do_not(produced):
    for split in ("train", "test"):
        for row in produced[("prompt", "instruct")][split]:
            constraints = json.loads(row["metadata_json"])["constraints"]
            pair = next(p for p in produced[("preference", "instruct")][split] if p["id"] == f"{row['id']}-pref")
            assert instruct.check_all(constraints, pair["chosen"]), (constraints, pair["chosen"])
            # The rejected reply breaks the base constraint only, so the pair isolates that one rule.
            base, *formats = constraints
            assert not instruct.check(base, pair["rejected"]), (base, pair["rejected"])
            assert instruct.check_all(formats, pair["rejected"]), (formats, pair["rejected"])
    kinds = Counter(c["kind"] for row in produced[("prompt", "instruct")]["train"]
                    for c in json.loads(row["metadata_json"])["constraints"])
    assert set(kinds) == set(instruct.CHECKS)


@pytest.mark.parametrize(
    ("constraint", "passing", "failing"),
    [
        ({"kind": "word_count", "n": 3}, "Snow, frost and", "Snow and frost fall."),
        ({"kind": "max_words", "n": 4}, "Rain: puddles everywhere.", "Rain brings puddles and clouds."),
        ({"kind": "max_words", "n": 4}, "Short.", ""),
        ({"kind": "include_word", "word": "quiet"}, "A QUIET forest.", "A quieter forest."),
        ({"kind": "comma_list", "n": 3}, "bees, soil, roses", "bees, soil and roses"),
        ({"kind": "comma_list", "n": 3}, "bees,soil , roses", "bees, , roses"),
        ({"kind": "uppercase"}, "THE OCEAN: WAVES.", "THE OCEAn."),
        ({"kind": "uppercase"}, "OK!", "123!"),
        ({"kind": "ends_with", "suffix": "!"}, "Chess is fun!  ", "Chess is fun!?"),
    ],
)
def test_checker_accepts_and_rejects(constraint, passing, failing):
    assert instruct.check(constraint, passing)
    assert not instruct.check(constraint, failing)


def test_checker_refuses_unknown_constraints():
    with pytest.raises(ValueError, match="unknown constraint kind"):
        instruct.check({"kind": "rhymes"}, "anything")


def test_chat_pairs_prefer_the_anchor_of_the_asked_subject(produced):
    subjects_by_question = {
        template.format(subject=subject): subject for subject in ANCHORS for template in chat.QUESTION_TEMPLATES
    }
    for row in produced[("preference", "chat")]["train"]:
        assert row["chosen"] == ANCHORS[subjects_by_question[row["prompt"][0]["content"]]]
        assert row["rejected"] != row["chosen"]
    kinds = Counter(row["id"].rsplit("-", 1)[-1] for row in produced[("preference", "chat")]["train"])
    assert set(kinds) == set(chat.REJECTION_KINDS)
    for row in produced[("prompt", "chat")]["test"]:
        assert json.loads(row["metadata_json"])["subject"] in chat.HELD_OUT_SUBJECTS


def test_held_out_chat_pairs_show_no_training_reply():
    training_anchors = {ANCHORS[subject] for subject in chat.subjects_for("train")}
    pairs = chat.preference_pairs(300, seed=0, split="test")
    assert {pair.rejection_kind for pair in pairs} == set(chat.REJECTION_KINDS)
    for pair in pairs:
        assert pair.chosen not in training_anchors and pair.rejected not in training_anchors


def test_judge_verdicts_parse_to_scores_that_rank_reply_kinds():
    examples = judge.generate(200, seed=3, split="train")
    scores = {kind: [e.score for e in examples if e.reply_kind == kind] for kind in judge.GRADES}
    assert all(scores.values())
    for example in examples:
        assert judge.parse_score(example.messages()[-1]["content"]) == example.score
    assert min(scores["anchor"]) > max(scores["partial"]) > max(scores["too_short"]) >= max(scores["off_topic"])
    assert judge.parse_score("I'd give it Score: 11") is None
    assert judge.parse_score("Score: 0\nRationale: none") is None


def test_mode_assignment_follows_the_mix_and_is_stable_per_id():
    ids = [f"conversation-{i}" for i in range(4000)]
    modes = assign_modes(ids, MIX, seed=1)
    shares = Counter(modes)
    for mode, weight in MIX.items():
        assert abs(shares[mode] / len(ids) - weight) < 0.03, shares
    assert assign_modes(ids[100:200], MIX, seed=1) == modes[100:200]
    assert assign_modes(ids, dict(reversed(MIX.items())), seed=1) == modes
    assert assign_modes(ids, MIX, seed=2) != modes
    assert set(assign_modes(ids, {"off": 1.0}, seed=1)) == {"off"}
    with pytest.raises(ValueError, match="unknown thinking modes"):
        assign_modes(ids, {"always": 1.0}, seed=1)


def test_rows_carry_the_mix_and_default_to_interleaved(produced):
    for suite in SUITES:
        rows = produced[("chat", suite)]["train"]
        shares = Counter(row["thinking_mode"] for row in rows)
        assert set(shares) == set(CHAT_THINKING_MODE.values()), (suite, shares)
        assert shares["interleaved"] > shares["preserved"] > shares["turn"], (suite, shares)
    default = suite_splits("arith", SuiteSizes(train=50, test=10), seed=7)
    assert {row["thinking_mode"] for split in default.values() for row in split} == {"interleaved"}


def test_apply_thinking_mode_leaves_its_input_alone():
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "reasoning_content": "Greet.", "content": "Hello!"}]
    turned_off, kwargs = apply_thinking_mode(messages, "off")
    assert turned_off[1] == {"role": "assistant", "content": "Hello!", "thinking": False}
    assert kwargs["enable_thinking"] is False
    assert messages[1]["reasoning_content"] == "Greet."
    assert apply_thinking_mode(messages, "preserved")[1]["clear_thinking"] is False
    with pytest.raises(ValueError, match="unknown thinking mode"):
        apply_thinking_mode(messages, "sometimes")


def test_thinking_off_rows_render_without_reasoning(produced, tokenizer):
    rendered = Counter()
    for suite in SUITES:
        for row in produced[("chat", suite)]["train"][:60]:
            tools = json.loads(row["tools_json"]) if row["tools_json"] else None
            messages = messages_from_records(row["messages"])
            mode = {chat_mode: mode for mode, chat_mode in CHAT_THINKING_MODE.items()}[row["thinking_mode"]]
            _, kwargs = apply_thinking_mode(messages, mode)
            sample = render(tokenizer, messages, tools, **kwargs)
            has_reasoning = "<think>" in sample.text
            # Thinking-on rows end on a reasoned reply, so they show that reasoning would be seen here.
            assert has_reasoning == (row["thinking_mode"] != "turn"), (suite, row["id"], sample.text)
            if row["thinking_mode"] == "turn":
                prompt = render(tokenizer, messages[:1], tools, add_generation_prompt=True, **kwargs)
                assert prompt.text.endswith("<|assistant|></think>")
            rendered[row["thinking_mode"]] += 1
    assert rendered["turn"] > 0
