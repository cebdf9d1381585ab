"""GLM-5's MTP layer (model/mtp.py): carried under GLM-5's names through load and save, trained by its own loss alone,
kept through SFT and an RL stage (trained, or frozen bit for bit), and said in lineage."""

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from infra.store import open_store
from model.mtp import MtpConfigError, attach_mtp, mtp_layer, mtp_loss
from model.presets import build_model, load_model
from stages.grpo.config import ReasoningRlConfig
from tests.sft_fixtures import run_sft, small_config
from tests.stage_jobs import run_stage_job

MTP = "model.layers.3."  # glm5-tiny has 3 layers: its MTP layer is the fourth


def test_a_preset_checkpoint_carries_its_mtp_layer_under_glm5s_names(tokenizer, tmp_path):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as handle:
        saved = {key for key in handle.keys() if key.startswith(MTP)}
    # GLM-5's layer 78: the projection of [embedding, hidden state], its norms, a whole MoE decoder layer saved one
    # expert at a time, the head's norm (the head and the embedding are the model's own: no copies).
    assert {MTP + name for name in ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight",
                                    "self_attn.kv_b_proj.weight", "self_attn.indexer.wk.weight",
                                    "mlp.gate.e_score_correction_bias", "mlp.experts.3.down_proj.weight")} <= saved
    assert not any("embed_tokens" in key or "shared_head.head" in key for key in saved)
    loaded = load_model(tmp_path)
    before, after = model.state_dict(), loaded.state_dict()
    assert set(before) == set(after) and all(torch.equal(before[key], after[key]) for key in before)
    # The preset's own weights are those a model without MTP gets from the same seed.
    config = model.config.to_dict() | {"num_nextn_predict_layers": 0}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        plain = type(model)(type(model.config).from_dict(config))
    assert all(torch.equal(value, before[key]) for key, value in plain.state_dict().items())


def test_a_checkpoint_that_declares_mtp_but_lacks_a_tensor_is_refused_by_name(tokenizer, tmp_path):
    build_model("glm5-tiny", tokenizer, seed=0).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights[MTP + "eh_proj.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MtpConfigError, match=r"lack model\.layers\.3\.eh_proj\.weight"):
        load_model(tmp_path)


def test_more_than_one_mtp_layer_is_refused_by_name(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    model.model.layers = model.model.layers[:3]
    model.config.num_nextn_predict_layers = 2
    with pytest.raises(MtpConfigError, match="num_nextn_predict_layers is 2"):
        attach_mtp(model)


def test_the_mtp_loss_reaches_the_mtp_layer_alone_and_learns(tokenizer):
    model = build_model("glm5-tiny", tokenizer, seed=0)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 200, (4, 24), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0  # a right-padded row
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    mtp_loss(model, hidden, ids, mask, mask, depths=3).backward()
    layer = {id(p) for p in mtp_layer(model).parameters()}
    assert all(p.grad is None for p in model.parameters() if id(p) not in layer)
    trained = [p for p in mtp_layer(model).parameters() if p.grad is not None]
    assert trained and all(torch.isfinite(p.grad).all() for p in trained)
    # A repeated pattern is learnt: the loss at depth 3 falls when trained on it.
    pattern = torch.arange(10, 22).repeat(4, 2)
    optimizer = torch.optim.AdamW(mtp_layer(model).parameters(), lr=1e-2)
    ones = torch.ones_like(pattern)
    with torch.no_grad():
        fixed = model.model(input_ids=pattern, attention_mask=ones).last_hidden_state
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = mtp_loss(model, fixed, pattern, ones, ones, depths=3)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def saved_tensors(store, name: str, tmp_path: Path) -> dict[str, torch.Tensor]:
    return load_file(Path(store.open(name).download(tmp_path / name.replace("/", "-"))) / "model.safetensors")


def mtp_tensors(store, name: str, tmp_path: Path) -> dict[str, torch.Tensor]:
    return {key: value for key, value in saved_tensors(store, name, tmp_path).items() if key.startswith(MTP)}


@pytest.mark.slow
def test_sft_trains_the_mtp_layer_and_an_rl_stage_keeps_it_frozen_bit_for_bit(small_store, tmp_path):
    store = open_store(small_store["root"])
    sft = small_config(small_store, "mtp-sft", dsa={"dense_steps": 3, "indexer_warmup_steps": 2})
    events = run_sft(sft, tmp_path)
    steps = [e for e in events if e["event"] == "step"]
    # Trained outside the indexer's warm-up (steps 4 and 5), beside the LM loss.
    assert [("mtp_loss" in s) for s in steps] == [True, True, True, False, False, True, True, True]
    init, trained = mtp_tensors(store, small_store["init"], tmp_path), mtp_tensors(store, sft.output_name, tmp_path)
    assert set(init) == set(trained) and any(not torch.equal(init[k], trained[k]) for k in init)
    assert store.open(sft.output_name).lineage()["mtp"] == {"layers": 1, "trained": True, "depths": 3}
    # The layer trains apart: the same SFT with it frozen leaves the model's own weights the same. Not bit for bit:
    # the sparse phase's CPU kernels round by where their buffers lie, which the layer's own work moves (a run with
    # a few unrelated allocations between micro-batches differs as much, ~1e-8 after these steps); a gradient of
    # the layer's reaching the model would move its weights by about the learning rate (3e-3).
    frozen = small_config(small_store, "mtp-sft-frozen", dsa={"dense_steps": 3, "indexer_warmup_steps": 2},
                          mtp={"train": False})
    run_sft(frozen, tmp_path)
    with_mtp, without = (saved_tensors(store, c.output_name, tmp_path) for c in (sft, frozen))
    main = [key for key in with_mtp if not key.startswith(MTP)]
    assert main
    for key in main:
        torch.testing.assert_close(with_mtp[key], without[key], rtol=0, atol=1e-6, msg=key)

    rl = ReasoningRlConfig(run_id="mtp-frozen", store=small_store["root"], init_checkpoint=store.open(sft.output_name).uri,
                           datasets=[u for u in small_store["datasets"] if "arith" in u], max_steps=2,
                           prompts_per_step=4, group_size=4, sampling={"max_new_tokens": 16},
                           optimizer={"warmup_steps": 0}, mtp={"train": False}, checkpoint_every=100)
    run_stage_job("stages.grpo.reasoning", rl, tmp_path)
    kept = mtp_tensors(store, rl.output_name, tmp_path)
    assert set(kept) == set(trained) and all(torch.equal(kept[k], trained[k]) for k in kept)
    assert store.open(rl.output_name).lineage()["mtp"] == {"layers": 1, "trained": False, "depths": None}
