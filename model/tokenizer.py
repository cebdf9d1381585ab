"""Byte-level BPE tokenizer carrying GLM-5's special tokens, trained on the conversations it is given.

Saved as a standard Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json,
chat_template.jinja) so `AutoTokenizer.from_pretrained(dir)` works offline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from model import special_tokens as st
from model.renderer import tools_text

DEFAULT_VOCAB_SIZE = 2048


def chat_template_text() -> str:
    return resources.files("model").joinpath("chat_template.jinja").read_text(encoding="utf-8")


def corpus_texts(conversations: Iterable[tuple[list[dict], list | None]]) -> Iterator[str]:
    """Every piece of free text in the conversations; special tokens are added, not learned."""
    yield chat_template_text()
    for messages, tools in conversations:
        if tools:
            # The rendered tools block is text the model reads in every tool conversation.
            yield tools_text(tools)
        for message in messages:
            yield message.get("content") or ""
            yield message.get("reasoning_content") or ""
            for call in message.get("tool_calls") or []:
                yield call["name"] + json.dumps(call["arguments"], ensure_ascii=False)


def train_tokenizer(
    conversations: Iterable[tuple[list[dict], list | None]], vocab_size: int = DEFAULT_VOCAB_SIZE
) -> PreTrainedTokenizerFast:
    """Train on `conversations` (e.g. `suites.tokenizer_corpus.suite_conversations()`, or a team's own
    data); the same input gives the same tokenizer."""
    # Digits stay single tokens so arithmetic is learnable at demo scale. A capitalized word is its own
    # pre-token, so a name has one tokenization wherever it appears (question, tool argument, tool
    # result) and copying it copies tokens; merged with the text around it, the same name became
    # different tokens in different places. Other text may still merge into phrase tokens.
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[A-Z][a-z]+"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=st.CONTROL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus_texts(conversations), trainer=trainer)
    bpe.add_tokens([AddedToken(token, normalized=False, special=False) for token in st.STRUCTURE_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=st.ENDOFTEXT,
        pad_token=st.ENDOFTEXT,
        additional_special_tokens=st.CONTROL_TOKENS[1:],
        chat_template=chat_template_text(),
        model_max_length=8192,
        clean_up_tokenization_spaces=False,
    )


def build_tokenizer_dir(
    out_dir: str | Path, conversations: Iterable[tuple[list[dict], list | None]]
) -> Path:
    out = Path(out_dir)
    train_tokenizer(conversations).save_pretrained(out)
    return out


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
