"""Random conversations: the renderer and the Jinja template agree on text and ids for every mode."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.renderer import render

# Free text with whitespace, digits, unicode and markup-like characters, plus the odd special token.
TEXT = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=40),
    st.sampled_from(["", "  padded  ", "<think>", "a</think>b", "<|user|>", "\n\nx\n"]),
)
ARG_VALUE = st.one_of(TEXT, st.integers(-1000, 1000), st.lists(st.integers(0, 9), max_size=3), st.booleans())
TOOL_CALL = st.fixed_dictionaries(
    {"name": st.sampled_from(["search", "open", "calc"]),
     "arguments": st.dictionaries(st.sampled_from(["query", "title", "n"]), ARG_VALUE, max_size=3)}
)
ASSISTANT = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": TEXT},
    optional={"reasoning_content": TEXT, "tool_calls": st.lists(TOOL_CALL, max_size=2), "error": st.booleans()},
)
OTHER = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "tool"]), "content": TEXT})
CONVERSATION = st.lists(st.one_of(ASSISTANT, OTHER), min_size=1, max_size=8)
KWARGS = st.fixed_dictionaries(
    {"clear_thinking": st.booleans(), "add_generation_prompt": st.booleans(), "enable_thinking": st.booleans()}
)
TOOLS = st.sampled_from([None, [{"type": "function", "function": {"name": "search", "parameters": {}}}]])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=CONVERSATION, kwargs=KWARGS, tools=TOOLS)
def test_renderer_matches_template(tokenizer, messages, kwargs, tools):
    sample = render(tokenizer, messages, tools, **kwargs)
    assert sample.text == tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
    assert sample.input_ids == tokenizer.apply_chat_template(messages, tools=tools, **kwargs)["input_ids"]
    assert len(sample.loss_mask) == len(sample.input_ids)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=CONVERSATION)
def test_error_flagged_turns_train_nothing(tokenizer, messages):
    flagged = [dict(m, error=True) if m["role"] == "assistant" else m for m in messages]
    assert sum(render(tokenizer, flagged, append_stop=True).loss_mask) == 0
    unflagged = [dict(m, error=False) if m["role"] == "assistant" else m for m in messages]
    trained = render(tokenizer, unflagged, append_stop=True)
    # Every assistant turn trains at least its stop token, so any assistant turn means a trained token.
    assert (sum(trained.loss_mask) > 0) == any(m["role"] == "assistant" for m in messages)
