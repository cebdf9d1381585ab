"""Whether a local Hugging Face checkpoint is one every stage can train: GLM-5's architecture, GLM's
special tokens, GLM-5's chat template. Checked before any work starts; a refusal names what is missing.

`GlmMoeDsaForCausalLM` (GLM-5, with DSA's indexer) runs every step. `Glm4MoeForCausalLM` (the same
MoE without an indexer) runs with the DSA steps skipped. The loss masks, the reply parser and the
rollout engine all read GLM's format, so the tokenizer must carry its special tokens as single tokens
and a chat template that renders conversations exactly as GLM-5's does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model import special_tokens as st
from model.tokenizer import chat_template_text, load_tokenizer

DSA_ARCHITECTURE = "GlmMoeDsaForCausalLM"
WITHOUT_DSA = ("Glm4MoeForCausalLM",)
# What the chat format, the loss masks and the reply parser are written in.
REQUIRED_TOKENS = (st.ENDOFTEXT, st.GMASK, st.SOP, st.SYSTEM, st.USER, st.ASSISTANT, st.OBSERVATION,
                   *st.STRUCTURE_TOKENS)
# Conversations whose rendering a checkpoint's template must reproduce character for character:
# system and user turns, reasoning, a tool call and its result, thinking on and off.
PROBES = (
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "reasoning_content": "Greet back.", "content": "Hello."},
      {"role": "user", "content": "2+2?"}], None, {"enable_thinking": True, "add_generation_prompt": True}),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
          "name": "weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "sunny"}],
     [{"type": "function", "function": {"name": "weather", "description": "today's weather",
                                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
     {"enable_thinking": False}),
)


class ModelCheckError(ValueError):
    """A checkpoint no stage can train; the message names the directory and what is missing."""


@dataclass(frozen=True)
class CheckedModel:
    architecture: str
    has_dsa: bool  # False: the DSA steps (indexer warm-up, sparse attention) are skipped


def check_model_dir(path: str | Path) -> CheckedModel:
    directory = Path(path)
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise ModelCheckError(f"{directory}: not a Hugging Face checkpoint (no config.json)")
    try:
        architectures = json.loads(config_file.read_text()).get("architectures") or []
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        raise ModelCheckError(f"{config_file}: not a JSON object ({error})") from None
    supported = (DSA_ARCHITECTURE, *WITHOUT_DSA)
    architecture = next((a for a in architectures if a in supported), None)
    if architecture is None:
        raise ModelCheckError(f"{config_file}: architecture {architectures or 'unnamed'} is not GLM-5's; posttrain "
                              f"trains {DSA_ARCHITECTURE} (or {', '.join(WITHOUT_DSA)}, without DSA)")
    try:
        tokenizer = load_tokenizer(directory)
    except (OSError, ValueError) as error:
        raise ModelCheckError(f"{directory}: no tokenizer that loads offline ({error})") from None
    missing = [token for token in REQUIRED_TOKENS if len(tokenizer.encode(token, add_special_tokens=False)) != 1]
    if missing:
        raise ModelCheckError(f"{directory}: the tokenizer lacks GLM's special token(s) {', '.join(missing)} "
                              "(each must be one token)")
    if not tokenizer.chat_template:
        raise ModelCheckError(f"{directory}: the tokenizer has no chat template (GLM-5's is model/chat_template.jinja)")
    for messages, tools, options in PROBES:
        theirs = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **options)
        ours = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, chat_template=chat_template_text(),
                                             **options)
        if theirs != ours:
            at = next((i for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b), min(len(theirs), len(ours)))
            raise ModelCheckError(f"{directory}: the chat template renders differently from GLM-5's from character {at} "
                                  f"(theirs {theirs[at:at + 40]!r}, GLM-5's {ours[at:at + 40]!r})")
    return CheckedModel(architecture, has_dsa=architecture == DSA_ARCHITECTURE)
