"""Batched greedy generation of one assistant turn per prompt, as a served model would answer.

The evaluator only sees `GenerateTurns`: prompts in, generated texts out. A model is one such
function; a fixed script of texts is another, which is how the scoring is tested on known outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import GenerationConfig

from model import special_tokens as st
from stages.evaluation.prompts import GenerateTurns, Prompt


def greedy_generator(model, tokenizer, max_new_tokens: int) -> GenerateTurns:
    """Greedy decoding with a KV cache, left-padded batches, stopping at GLM-5's stop tokens.

    Special tokens are kept in the decoded text because they are the structure being scored.
    """
    stop_ids = tokenizer.convert_tokens_to_ids(st.STOP_TOKENS)
    # Explicit, so that a checkpoint's saved sampling defaults cannot turn evaluation stochastic.
    config = GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id, use_cache=True,
    )

    def generate(prompts: Sequence[Prompt]) -> list[str]:
        texts = [
            tokenizer.apply_chat_template(
                list(prompt.messages), tools=prompt.tools, add_generation_prompt=True,
                enable_thinking=prompt.enable_thinking, tokenize=False,
            )
            for prompt in prompts
        ]
        # Left padding keeps every prompt's last token in the last column, where generation continues.
        batch = tokenizer(
            texts, add_special_tokens=False, padding=True, padding_side="left", return_tensors="pt"
        ).to(model.device)
        with torch.inference_mode():
            output = model.generate(**batch, generation_config=config)
        generated = output[:, batch["input_ids"].shape[1]:].tolist()
        return [tokenizer.decode(through_first_stop(ids, stop_ids), skip_special_tokens=False) for ids in generated]

    return generate


def through_first_stop(ids: list[int], stop_ids: Sequence[int]) -> list[int]:
    """Drop what follows the first stop token: the padding generate adds once a row has finished."""
    for position, token in enumerate(ids):
        if token in stop_ids:
            return ids[: position + 1]
    return ids
