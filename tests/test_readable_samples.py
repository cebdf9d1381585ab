"""Samples as the UI's table and `posttrain rollouts` show them: turns labelled by role without control tokens,
and the best and worst sample of each of a few groups."""

from model.readable import readable
from stages.common.rollout_record import best_and_worst
from tests.model_fixtures import tokenizer, tokenizer_dir  # noqa: F401


def test_a_chat_reads_as_labelled_turns_and_keeps_what_the_model_wrote(tokenizer):  # noqa: F811
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"},
                {"role": "assistant", "content": "The answer is 5.", "reasoning_content": "2 + 3 = 5"}]
    ids = tokenizer.apply_chat_template(messages, enable_thinking=True)["input_ids"]
    raw = tokenizer.decode(ids, skip_special_tokens=False)
    assert "<|user|>" in raw and "[gMASK]" in raw
    shown = readable(tokenizer, ids)
    assert shown.startswith("system: Be brief.")
    assert "\nuser: What is 2 + 3?" in shown and "\nassistant: " in shown
    assert "<think>2 + 3 = 5</think>" in shown  # the structure a model writes stays: it was rewarded
    assert not any(token in shown for token in ("<|user|>", "<|assistant|>", "[gMASK]", "<sop>", "<|system|>"))


def test_the_best_and_worst_of_each_group_in_turn():
    rows = [{"group_id": g, "reward": r, "n": i} for i, (g, r) in enumerate(
        [("a", 0.0), ("a", 1.0), ("a", 0.5), ("b", 1.0), ("b", 1.0), ("c", 0.2), ("c", None)])]
    assert [row["n"] for row in best_and_worst(rows, 10)] == [1, 0, 3, 5, 6]
    assert [row["n"] for row in best_and_worst(rows, 3)] == [1, 0, 3]


def test_a_completion_of_a_stop_token_alone_is_shown_as_it_is(tokenizer):  # noqa: F811
    ids = tokenizer.convert_tokens_to_ids(["<|endoftext|>"])
    assert readable(tokenizer, ids) == "<|endoftext|>"
