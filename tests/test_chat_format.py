"""Text parity with GLM-5's chat format, pinned by hand, and the renderer's token ids and loss mask."""

import pytest

from model.renderer import RenderError, render
from suites import arith, search

WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "weather", "description": "Weather for a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
TOOLS_HEADER = (
    '<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n'
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n'
    '{"type": "function", "function": {"name": "weather", "description": "Weather for a city.", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n'
    '</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n'
    '<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>'
    '<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>'
)
TWO_TURNS = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello!"},
    {"role": "user", "content": "Compute 2 + 3."},
    {"role": "assistant", "reasoning_content": "2 + 3 = 5", "content": "The answer is 5."},
]
AGENT = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Oslo and Bergen?"},
    {"role": "assistant", "reasoning_content": "Look both up.", "content": "Checking.",
     "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}},
                    {"function": {"name": "weather", "arguments": {"city": "Bergen", "days": 2, "units": ["C"]}}}]},
    {"role": "tool", "content": "Oslo: 3C"},
    {"role": "tool", "content": "Bergen: 5C"},
    {"role": "assistant", "reasoning_content": "Both are cold.", "content": "Oslo 3C, Bergen 5C."},
]

# Each expected text is written out by hand from GLM-5's official template: no separators between
# turns, reasoning kept after the last user message only (interleaved) or everywhere (preserved),
# `</think>` alone for a turn without reasoning, string arguments verbatim, others as JSON.
CASES = [
    ("one turn", [{"role": "user", "content": "Compute 2 + 3."},
                  {"role": "assistant", "reasoning_content": "2 + 3 = 5", "content": "The answer is 5."}], None, {},
     "[gMASK]<sop><|user|>Compute 2 + 3.<|assistant|><think>2 + 3 = 5</think>The answer is 5."),
    ("interleaved strips past reasoning", TWO_TURNS, None, {},
     "[gMASK]<sop><|user|>Hi<|assistant|></think>Hello!<|user|>Compute 2 + 3."
     "<|assistant|><think>2 + 3 = 5</think>The answer is 5."),
    ("preserved keeps all reasoning", TWO_TURNS, None, {"clear_thinking": False},
     "[gMASK]<sop><|user|>Hi<|assistant|><think>Greet back.</think>Hello!<|user|>Compute 2 + 3."
     "<|assistant|><think>2 + 3 = 5</think>The answer is 5."),
    ("turn-level thinking off", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], None, {},
     "[gMASK]<sop><|user|>Hi<|assistant|></think>Hello!"),
    ("generation prompt, thinking on", [{"role": "user", "content": "Hi"}], None, {"add_generation_prompt": True},
     "[gMASK]<sop><|user|>Hi<|assistant|><think>"),
    ("generation prompt, thinking off", [{"role": "user", "content": "Hi"}], None,
     {"add_generation_prompt": True, "enable_thinking": False},
     "[gMASK]<sop><|user|>Hi<|assistant|></think>"),
    ("tools, parallel calls, one observation", AGENT, [WEATHER_TOOL], {},
     "[gMASK]<sop>" + TOOLS_HEADER + "<|system|>You are a weather bot.<|user|>Oslo and Bergen?"
     "<|assistant|><think>Look both up.</think>Checking."
     "<tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
     "<tool_call>weather<arg_key>city</arg_key><arg_value>Bergen</arg_value><arg_key>days</arg_key>"
     "<arg_value>2</arg_value><arg_key>units</arg_key><arg_value>[\"C\"]</arg_value></tool_call>"
     "<|observation|><tool_response>Oslo: 3C</tool_response><tool_response>Bergen: 5C</tool_response>"
     "<|assistant|><think>Both are cold.</think>Oslo 3C, Bergen 5C."),
    ("reasoning inside content, whitespace stripped",
     [{"role": "user", "content": "Größe?"},
      {"role": "assistant", "content": "<think>\n 数学 \n</think>\n\n  Big.  "}], None, {},
     "[gMASK]<sop><|user|>Größe?<|assistant|><think>数学</think>Big."),
    ("tool call without reply text",
     [{"role": "user", "content": "Oslo?"},
      {"role": "assistant", "content": "", "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
      {"role": "tool", "content": "3C"}], None, {"add_generation_prompt": True},
     "[gMASK]<sop><|user|>Oslo?<|assistant|></think>"
     "<tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
     "<|observation|><tool_response>3C</tool_response><|assistant|><think>"),
]


@pytest.mark.parametrize("name,messages,tools,kwargs,expected", CASES, ids=[c[0] for c in CASES])
def test_template_and_renderer_render_the_official_text(tokenizer, name, messages, tools, kwargs, expected):
    assert tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs) == expected
    assert render(tokenizer, messages, tools, **kwargs).text == expected


@pytest.mark.parametrize("name,messages,tools,kwargs,expected", CASES, ids=[c[0] for c in CASES])
def test_renderer_ids_equal_apply_chat_template(tokenizer, name, messages, tools, kwargs, expected):
    ids = tokenizer.apply_chat_template(messages, tools=tools, **kwargs)["input_ids"]
    sample = render(tokenizer, messages, tools, **kwargs)
    assert sample.input_ids == ids
    assert len(sample.loss_mask) == len(ids)


def _trained(tokenizer, sample):
    return tokenizer.decode([t for t, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m])


def test_mask_trains_reasoning_reply_and_stop_only(tokenizer):
    sample = render(tokenizer, TWO_TURNS, append_stop=True)
    # Past turn: reply and its stop (<|user|>); last turn: reasoning, </think>, reply, final stop.
    assert sample.trained_text() == "Hello!<|user|>2 + 3 = 5</think>The answer is 5.<|user|>"
    assert _trained(tokenizer, sample) == sample.trained_text()
    assert sample.input_ids[-1] == tokenizer.convert_tokens_to_ids("<|user|>")


def test_mask_stops_a_tool_call_with_observation_and_skips_errors(tokenizer):
    messages = [
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "reasoning_content": "typo", "content": "",
         "tool_calls": [{"name": "weathr", "arguments": {"city": "Oslo"}}], "error": True},
        {"role": "tool", "content": "Error: unknown tool"},
        {"role": "assistant", "reasoning_content": "fix", "content": "",
         "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
    ]
    sample = render(tokenizer, messages, [WEATHER_TOOL], append_stop=True)
    assert sample.trained_text() == (
        "fix</think><tool_call>weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><|observation|>"
    )
    assert "weathr" in sample.text  # the error segment stays in context


def test_every_suite_conversation_round_trips(tokenizer):
    conversations = [(p.messages(), None) for p in arith.generate(20, seed=7)]
    conversations += [(list(e.messages), search.TOOLS) for e in search.generate(20, seed=7)]
    for messages, tools in conversations:
        for kwargs in ({}, {"clear_thinking": False}):
            sample = render(tokenizer, messages, tools, **kwargs)
            assert sample.input_ids == tokenizer.apply_chat_template(messages, tools=tools, **kwargs)["input_ids"]
            assert tokenizer.decode(sample.input_ids) == sample.text
            assert sum(sample.loss_mask) > 0


def test_unknown_role_is_named(tokenizer):
    with pytest.raises(RenderError, match="message 1: unknown role 'robot'"):
        render(tokenizer, [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])
