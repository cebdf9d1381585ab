"""GLM-5's special tokens: the names our tokenizer carries so that a real GLM-5 tokenizer and ours agree."""

ENDOFTEXT = "<|endoftext|>"
GMASK = "[gMASK]"
SOP = "<sop>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
OBSERVATION = "<|observation|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
ARG_KEY_OPEN = "<arg_key>"
ARG_KEY_CLOSE = "</arg_key>"
ARG_VALUE_OPEN = "<arg_value>"
ARG_VALUE_CLOSE = "</arg_value>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

# Control tokens: never shown to a reader (skip_special_tokens drops them).
CONTROL_TOKENS = [
    ENDOFTEXT, "[MASK]", GMASK, "[sMASK]", SOP, "<eop>",
    SYSTEM, USER, ASSISTANT, OBSERVATION,
    "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "/nothink",
]
# Structure tokens: atomic, but part of what a model writes, so decoding keeps them.
STRUCTURE_TOKENS = [
    THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE,
    ARG_KEY_OPEN, ARG_KEY_CLOSE, ARG_VALUE_OPEN, ARG_VALUE_CLOSE,
    TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE,
]
ALL_SPECIAL_TOKENS = CONTROL_TOKENS + STRUCTURE_TOKENS

# Generation stops at the next role token or end of text (GLM lists all three as eos ids).
STOP_TOKENS = [ENDOFTEXT, USER, OBSERVATION]
