"""Parsing a generated assistant turn: what the renderer writes parses back, malformed markup is named."""

import pytest

from model import special_tokens as st
from model.renderer import build_segments, tool_call_text
from model.tool_calls import ToolCall, parse_assistant_output
from suites import search


def test_tool_calls_written_by_the_renderer_parse_back():
    calls = [
        {"name": "open", "arguments": {"title": "Kalo Corp"}},
        {"name": "lookup", "arguments": {"query": "  spaced\nmultiline  ", "city": "Zürich", "empty": ""}},
        {"name": "noargs", "arguments": {}},
    ]
    text = "Look it up.</think>Checking." + "".join(tool_call_text(call) for call in calls) + st.OBSERVATION
    parsed = parse_assistant_output(text)
    assert parsed.well_formed and parsed.problem is None
    assert (parsed.reasoning, parsed.reply, parsed.stop) == ("Look it up.", "Checking.", st.OBSERVATION)
    assert [call.as_message_call() for call in parsed.tool_calls] == calls


def test_non_string_arguments_come_back_as_the_json_the_renderer_wrote():
    parsed = parse_assistant_output(tool_call_text({"name": "f", "arguments": {"days": 2, "units": ["C"]}}))
    assert parsed.tool_calls == [ToolCall("f", {"days": "2", "units": '["C"]'})]


def test_every_assistant_turn_the_template_renders_for_search_episodes_parses_back():
    for episode in search.generate(8, seed=3, error_rate=0.5):
        text = "".join(piece for piece, _ in build_segments(episode.messages, search.TOOLS, append_stop=True))
        turns = text.split(st.ASSISTANT)[1:]
        replies = [m for m in episode.messages if m["role"] == "assistant"]
        assert len(turns) == len(replies)
        for turn, message in zip(turns, replies, strict=True):
            # What a model generates: from after the prompt's <think> through the first stop token.
            generated = turn.removeprefix(st.THINK_OPEN)
            end = min(generated.index(stop) + len(stop) for stop in (st.USER, st.OBSERVATION) if stop in generated)
            parsed = parse_assistant_output(generated[:end])
            assert parsed.well_formed, parsed.problem
            assert parsed.reasoning == message["reasoning_content"]
            assert parsed.reply == message["content"]
            assert [c.as_message_call() for c in parsed.tool_calls] == message.get("tool_calls", [])


@pytest.mark.parametrize(
    "text,reasoning,reply,stop",
    [
        ("2 + 3 = 5</think>The answer is 5.<|user|>", "2 + 3 = 5", "The answer is 5.", st.USER),
        ("The answer is 5.<|endoftext|>", None, "The answer is 5.", st.ENDOFTEXT),  # thinking off
        ("<think>x</think>The answer is 5.", "x", "The answer is 5.", None),  # opened by the model; cut off
        ("\n</think>\nHi\n", "", "Hi", None),
    ],
)
def test_reasoning_reply_and_stop(text, reasoning, reply, stop):
    parsed = parse_assistant_output(text)
    assert parsed.well_formed
    assert (parsed.reasoning, parsed.reply, parsed.tool_calls, parsed.stop) == (reasoning, reply, [], stop)


CALL = "<tool_call>open<arg_key>title</arg_key><arg_value>Kalo Corp</arg_value></tool_call>"


@pytest.mark.parametrize(
    "text,problem",
    [
        ("r</think><tool_call>open<arg_key>title</arg_key><arg_value>Kalo", "left open"),
        ("r</think><tool_call>open<arg_key>title</arg_key><arg_value>Kalo</arg_value>", "unclosed <tool_call>"),
        ("r</think><tool_call>open<arg_key>title</arg_value>x</arg_value></tool_call>", "left open"),
        ("r</think><tool_call><arg_key>title</arg_key><arg_value>x</arg_value></tool_call>", "without a function name"),
        ("r</think><tool_call>  </tool_call>", "without a function name"),
        ("r</think><tool_call>open<arg_key>title</arg_key></tool_call>", "has no value"),
        ("r</think><tool_call>open<arg_key>title</arg_key>x</tool_call>", "has no value"),
        ("r</think><tool_call>open<arg_key> </arg_key><arg_value>x</arg_value></tool_call>", "empty argument key"),
        (
            "r</think><tool_call>open<arg_key>t</arg_key><arg_value>a</arg_value>"
            "<arg_key>t</arg_key><arg_value>b</arg_value></tool_call>",
            "given twice",
        ),
        ("r</think><tool_call>open<tool_call>open</tool_call></tool_call>", "inside the tool call"),
        ("r</think><tool_call>open stray<arg_key>t</arg_key><arg_value>x</arg_value>junk</tool_call>", "inside"),
        (f"r</think>{CALL} and more", "text after the tool calls"),
        (f"r</think>Sure</arg_value>{CALL}", "outside a tool call"),
        ("r</think>x</think>y", "stray </think>"),
        ("reply <think>more", "stray <think>"),
        (f"r</think>{CALL}<tool_response>Kalo Corp is…</tool_response>", "does not belong"),
        ("r</think>Hi<|assistant|>again", "does not belong"),
        ("r</think>Hi<|user|>again", "before the end of the turn"),
    ],
)
def test_malformed_markup_is_refused_with_a_reason(text, problem):
    parsed = parse_assistant_output(text)
    assert not parsed.well_formed
    assert parsed.tool_calls == []
    assert problem in parsed.problem


def test_whitespace_between_calls_and_arguments_is_tolerated():
    second = "<tool_call> open \n<arg_key> title </arg_key>\n<arg_value>x</arg_value>\n</tool_call>"
    text = f"r</think>\n{CALL}\n {second}\n"
    parsed = parse_assistant_output(text)
    assert parsed.well_formed, parsed.problem
    assert parsed.tool_calls == [ToolCall("open", {"title": "Kalo Corp"}), ToolCall("open", {"title": "x"})]
