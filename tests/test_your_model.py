"""A person's own checkpoint: a local Hugging Face directory of GLM-5's architecture (or GLM-4-MoE's,
without DSA's indexer) whose tokenizer, trained on other text, carries GLM's special tokens and chat
template. Anything else is refused before any work starts, naming what is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
from typer.testing import CliRunner

from model.checks import ModelCheckError, check_model_dir
from model.presets import build_model, padded_vocab_size
from model.special_tokens import OBSERVATION, STOP_TOKENS
from model.tokenizer import build_tokenizer_dir, load_tokenizer
from posttrain.cli import app

REPO = Path(__file__).resolve().parent.parent
# Not the suites' text: a tokenizer a person trained on their own corpus.
OTHER_TEXT = [([{"role": "user", "content": f"Which bird sings at dawn in garden {i}?"},
                {"role": "assistant", "content": f"In garden {i} the robin sings first, then the wren."}], None)
              for i in range(300)]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tokenizer_dir(tmp_path_factory.mktemp("their-tokenizer") / "tokenizer", OTHER_TEXT)


def glm4_moe_checkpoint(tokenizer_dir: Path, out: Path) -> Path:
    """Random tiny weights of GLM-4-MoE: GLM-5's MoE without the DSA indexer."""
    tokenizer = load_tokenizer(tokenizer_dir)
    config = Glm4MoeConfig(
        vocab_size=padded_vocab_size(tokenizer), hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, n_routed_experts=4,
        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in STOP_TOKENS])
    torch.manual_seed(0)
    Glm4MoeForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def glm5_checkpoint(tokenizer_dir: Path, out: Path) -> Path:
    tokenizer = load_tokenizer(tokenizer_dir)
    build_model("glm5-tiny", tokenizer, seed=0).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_glm5_and_glm4_moe_checkpoints_pass_with_and_without_dsa(tokenizer_dir, tmp_path):
    assert check_model_dir(glm5_checkpoint(tokenizer_dir, tmp_path / "glm5")).has_dsa
    checked = check_model_dir(glm4_moe_checkpoint(tokenizer_dir, tmp_path / "glm4"))
    assert checked.architecture == "Glm4MoeForCausalLM" and not checked.has_dsa


def _without_observation_token(directory: Path) -> None:
    """The tokenizer as one trained without `<|observation|>` among its special tokens."""
    tokenizer_json = json.loads((directory / "tokenizer.json").read_text())
    tokenizer_json["added_tokens"] = [t for t in tokenizer_json["added_tokens"] if t["content"] != OBSERVATION]
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {k: v for k, v in config.get("added_tokens_decoder", {}).items()
                                      if v["content"] != OBSERVATION}
    config["extra_special_tokens"] = [t for t in config.get("extra_special_tokens", []) if t != OBSERVATION]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))


def _edit_template(directory: Path, edit) -> None:
    template = directory / "chat_template.jinja"
    if edit is None:
        template.unlink()
    else:
        template.write_text(edit(template.read_text()))


@pytest.mark.parametrize("break_it, named", [
    (lambda d: (d / "config.json").unlink(), "no config.json"),
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                          "architectures": ["LlamaForCausalLM"]})),
     r"architecture \['LlamaForCausalLM'\] is not GLM-5's"),
    (_without_observation_token, r"lacks GLM's special token\(s\) <\|observation\|>"),
    (lambda d: _edit_template(d, None), "has no chat template"),
    (lambda d: _edit_template(d, lambda text: text.replace("<|assistant|>{{", "<|assistant|>\n{{")),
     "renders differently from GLM-5's from character"),
])
def test_anything_else_is_refused_naming_what_is_missing(tokenizer_dir, tmp_path, break_it, named):
    directory = glm5_checkpoint(tokenizer_dir, tmp_path / "model")
    break_it(directory)
    with pytest.raises(ModelCheckError, match=named):
        check_model_dir(directory)


@pytest.mark.slow
def test_a_checkpoint_without_dsa_trains_with_the_dsa_steps_skipped(tokenizer_dir, tmp_path):
    glm4_moe_checkpoint(tokenizer_dir, tmp_path / "my-glm4-moe")
    spec = yaml.safe_load((REPO / "examples" / "spec.yaml").read_text())
    spec["model"] = {"path": "my-glm4-moe"}
    for entry in spec["data"]["imports"].values():
        entry["path"] = str(REPO / "examples" / entry["path"])
    spec["stages"]["sft"]["max_steps"] = 3
    del spec["stages"]["reasoning_rl"], spec["stages"]["distill"]  # SFT is where DSA's steps are
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    posttrain = str(Path(sys.executable).with_name("posttrain"))
    check = subprocess.run([posttrain, "spec", "check", "spec.yaml"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0 and "Glm4MoeForCausalLM (no DSA indexer: DSA steps skipped)" in check.stdout, check
    env = {k: v for k, v in os.environ.items() if k != "POSTTRAIN_STORE"}
    done = subprocess.run([posttrain, "pipeline", "--spec", "spec.yaml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = tmp_path / "artifacts" / "runs"
    run_dir = runs / (runs / "LATEST").read_text().strip()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["sft"]
    assert (summary["stages"][0]["metrics_after"].keys() == {"my-chats/format_validity", "my-chats/reply_match"})
    assert "has no DSA indexer: the DSA steps" in (run_dir / "report.md").read_text()
    (init,) = (tmp_path / "artifacts" / "checkpoints" / "init").glob("my-glm4-moe-*")
    lineage = json.loads((init / "lineage.json").read_text())
    assert lineage["config"]["architecture"] == "Glm4MoeForCausalLM" and lineage["config"]["dsa"] is False


def test_a_refused_checkpoint_stops_the_pipeline_before_any_work(tokenizer_dir, tmp_path):
    directory = glm5_checkpoint(tokenizer_dir, tmp_path / "broken")
    _without_observation_token(directory)
    spec = yaml.safe_load((REPO / "examples" / "spec.yaml").read_text())
    spec["model"] = {"path": "broken"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    check = CliRunner().invoke(app, ["spec", "check", str(tmp_path / "spec.yaml")])
    assert check.exit_code == 1 and "model.path: " in check.stderr and "<|observation|>" in check.stderr

