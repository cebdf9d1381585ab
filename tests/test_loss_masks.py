"""The loss mask token by token, for each thinking mode and for error segments.

Each expectation lists the rendered tokens with a trained/untrained flag, written out by hand.
"""

import pytest

from model.renderer import render
from model.thinking import apply_thinking_mode

CONVERSATION = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "reasoning_content": "greet", "content": "Hello"},
    {"role": "user", "content": "2+3?"},
    {"role": "assistant", "reasoning_content": "add", "content": "5"},
]


def tokens_with_mask(tokenizer, sample):
    """Group consecutive tokens with the same flag into (text, flag) runs, for readable expectations."""
    runs = []
    for token_id, flag in zip(sample.input_ids, sample.loss_mask, strict=True):
        text = tokenizer.decode([token_id])
        if runs and runs[-1][1] == flag:
            runs[-1] = (runs[-1][0] + text, flag)
        else:
            runs.append((text, flag))
    return runs


EXPECTED = {
    "interleaved": [
        ("[gMASK]<sop><|user|>Hi<|assistant|></think>", 0), ("Hello<|user|>", 1),
        ("2+3?<|assistant|><think>", 0), ("add</think>5<|user|>", 1),
    ],
    "preserved": [
        ("[gMASK]<sop><|user|>Hi<|assistant|><think>", 0), ("greet</think>Hello<|user|>", 1),
        ("2+3?<|assistant|><think>", 0), ("add</think>5<|user|>", 1),
    ],
    "off": [
        ("[gMASK]<sop><|user|>Hi<|assistant|></think>", 0), ("Hello<|user|>", 1),
        ("2+3?<|assistant|></think>", 0), ("5<|user|>", 1),
    ],
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_mask_per_thinking_mode(tokenizer, mode):
    messages, kwargs = apply_thinking_mode(CONVERSATION, mode)
    sample = render(tokenizer, messages, append_stop=True, **kwargs)
    # Runs are built token by token, so a single mis-flagged token splits a run and fails the comparison.
    assert tokens_with_mask(tokenizer, sample) == EXPECTED[mode]
    assert len(sample.loss_mask) == len(sample.input_ids)


def test_error_segment_stays_in_context_with_mask_zero(tokenizer):
    messages = [
        {"role": "user", "content": "Find X"},
        {"role": "assistant", "reasoning_content": "try", "content": "",
         "tool_calls": [{"name": "open", "arguments": {"title": "Y"}}], "error": True},
        {"role": "tool", "content": "no page"},
        {"role": "assistant", "reasoning_content": "retry", "content": "",
         "tool_calls": [{"name": "open", "arguments": {"title": "X"}}]},
        {"role": "tool", "content": "X page"},
        {"role": "assistant", "reasoning_content": "done", "content": "X"},
    ]
    runs = tokens_with_mask(tokenizer, render(tokenizer, messages, append_stop=True))
    assert runs == [
        ("[gMASK]<sop><|user|>Find X<|assistant|><think>try</think>"
         "<tool_call>open<arg_key>title</arg_key><arg_value>Y</arg_value></tool_call>"
         "<|observation|><tool_response>no page</tool_response><|assistant|><think>", 0),
        ("retry</think><tool_call>open<arg_key>title</arg_key><arg_value>X</arg_value></tool_call><|observation|>", 1),
        ("<tool_response>X page</tool_response><|assistant|><think>", 0),
        ("done</think>X<|user|>", 1),
    ]
