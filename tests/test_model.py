"""Model presets, the tokenizer directory, and loading a local checkpoint."""

import hashlib

import pytest
import torch

from model import special_tokens as st
from model.presets import PRESETS, UnknownPresetError, build_model, load_model, parameter_count
from model.tokenizer import build_tokenizer_dir, load_tokenizer
from suites.tokenizer_corpus import suite_conversations


def test_tokenizer_is_deterministic_and_carries_glm5_tokens(tokenizer_dir, tmp_path):
    again = build_tokenizer_dir(tmp_path / "again", suite_conversations())
    digest = lambda d: hashlib.sha256((d / "tokenizer.json").read_bytes()).hexdigest()  # noqa: E731
    assert digest(again) == digest(tokenizer_dir)
    tokenizer = load_tokenizer(tokenizer_dir)
    for token in st.ALL_SPECIAL_TOKENS:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, f"{token} is not a single token"
    assert tokenizer.eos_token == st.ENDOFTEXT
    # Digits are single tokens: the arithmetic suite needs them.
    assert len(tokenizer("12345", add_special_tokens=False)["input_ids"]) == 5


@pytest.mark.parametrize("name,low,high", [("glm5-tiny", 1e6, 3e6), ("glm5-small", 20e6, 50e6)])
def test_preset_sizes_and_glm5_shape(tokenizer, name, low, high):
    model = build_model(name, tokenizer)
    assert low <= parameter_count(model) <= high
    config = model.config
    assert config.mlp_layer_types[0] == "dense" and set(config.mlp_layer_types[1:]) == {"sparse"}
    assert config.n_shared_experts == 1 and config.n_routed_experts > config.num_experts_per_tok
    assert config.kv_lora_rank < config.hidden_size  # MLA compresses keys and values
    assert config.index_topk < 256  # the demo's sequences are longer, so DSA selects keys
    assert config.vocab_size >= len(tokenizer)


def test_same_seed_same_weights_and_unknown_preset(tokenizer):
    first, second = build_model("glm5-tiny", tokenizer, seed=5), build_model("glm5-tiny", tokenizer, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True))
    with pytest.raises(UnknownPresetError, match="glm5-huge"):
        build_model("glm5-huge", tokenizer)
    assert set(PRESETS) == {"glm5-tiny", "glm5-small"}


def test_local_checkpoint_loads_with_identical_logits(tokenizer, tmp_path):
    model = build_model("glm5-tiny", tokenizer, seed=1).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = load_model(tmp_path).eval()
    # Longer than index_topk, so the sparse path runs too.
    ids = torch.randint(0, len(tokenizer), (2, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert load_tokenizer(tmp_path).get_vocab() == tokenizer.get_vocab()


def test_load_model_names_a_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
