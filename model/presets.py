"""GLM-5 architecture presets on transformers' `GlmMoeDsaForCausalLM`.

Every preset keeps GLM-5's shape at a small scale: a dense first layer then MoE layers with a shared
expert and a sigmoid router, MLA attention, and a DSA indexer whose top-k is smaller than the demo's
sequences so sparse attention is really exercised.

glm5-tiny selects 48 keys per query: the demo's search episodes (102 tokens at the median, 121 at most in
training, a few hundred once tool results come back) need more than 32 visible keys for a valid tool call. On
the same SFT checkpoint (trained sparse at 32), search format validity was 0.66 at 32 keys, 0.97 at 40 and
1.00 at 48, as with dense attention. arith and calc (at most 59 and 64 tokens) go sparse past 48 tokens.

glm5-small (the `small` and `gpu` specs) selects 64: above what search's tool calls need at tiny scale,
below the contexts those specs reach (SFT samples of up to 512 tokens, search episodes of up to six
128-token turns with their tool results), so a search episode attends to a fraction of its keys. At
long context bench/dsa_attention.py measures what it saves (sparse-gather vs dense, 2K-16K tokens).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GlmMoeDsaConfig, GlmMoeDsaForCausalLM, PreTrainedTokenizerBase

from model import special_tokens as st
from model.mtp import attach_mtp, load_mtp_weights

# The MTP layer of a fresh preset model is initialised from seed + this (build_model).
MTP_SEED_OFFSET = 7919

PRESETS: dict[str, dict] = {
    # ~1.3M parameters with the demo tokenizer (vocab 2056): the demo and the tests.
    "glm5-tiny": dict(
        hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=384, moe_intermediate_size=128, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, kv_lora_rank=32, q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=16,
        v_head_dim=32, index_topk=48, index_head_dim=16, index_n_heads=2, first_k_dense_replace=1,
        num_nextn_predict_layers=1,
    ),
    # ~42M parameters: a step up for a single GPU.
    "glm5-small": dict(
        hidden_size=512, num_hidden_layers=7, num_attention_heads=8, num_key_value_heads=8,
        intermediate_size=1536, moe_intermediate_size=384, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, kv_lora_rank=128, q_lora_rank=256, qk_rope_head_dim=32, qk_nope_head_dim=32,
        v_head_dim=64, index_topk=64, index_head_dim=32, index_n_heads=4, first_k_dense_replace=1,
        num_nextn_predict_layers=1,
    ),
}


class UnknownPresetError(KeyError):
    def __str__(self) -> str:
        return f"unknown model preset {self.args[0]!r}; known presets: {', '.join(sorted(PRESETS))}"


def padded_vocab_size(tokenizer: PreTrainedTokenizerBase, multiple: int = 64) -> int:
    return -(-len(tokenizer) // multiple) * multiple


def preset_config(name: str, tokenizer: PreTrainedTokenizerBase, max_positions: int = 4096) -> GlmMoeDsaConfig:
    if name not in PRESETS:
        raise UnknownPresetError(name)
    stop_ids = tokenizer.convert_tokens_to_ids(st.STOP_TOKENS)
    return GlmMoeDsaConfig(
        vocab_size=padded_vocab_size(tokenizer),
        max_position_embeddings=max_positions,
        routed_scaling_factor=1.0,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=stop_ids,
        tie_word_embeddings=False,
        **PRESETS[name],
    )


def build_model(name: str, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> GlmMoeDsaForCausalLM:
    """A freshly initialised model with its MTP layer; the same seed gives the same weights. The MTP layer draws
    from its own seed after the model: the model's weights are those of a preset without one."""
    config = preset_config(name, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GlmMoeDsaForCausalLM(config)
        torch.manual_seed(seed + MTP_SEED_OFFSET)
        attach_mtp(model)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model


def load_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """Any local Hugging Face checkpoint directory; never touches the network."""
    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory}: not a Hugging Face checkpoint directory (no config.json)")
    with quiet_about_mtp():
        model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True, dtype=dtype)
    if attach_mtp(model) is not None:
        load_mtp_weights(model, directory)
    return model


@contextmanager
def quiet_about_mtp():
    """transformers reports the MTP layer's tensors as unused (it knows GLM-5's layer 78 alone); they are read
    right after (model/mtp.py), so its warning would mislead."""
    from transformers.utils import logging

    previous = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(previous)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
