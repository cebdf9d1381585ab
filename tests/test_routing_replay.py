"""Routing replay (model/routing.py): the engine returns each position's experts as SGLang does, and the trainer
either measures how often its own choice agrees or trains through the engine's choice. An engine serving bf16
beside a trainer in fp32 is the mismatch replay is for."""

import pytest
import torch

from model.dsa import install_dsa_indexers, set_dense_attention
from model.logprobs import scored_logprobs
from model.presets import build_model, load_model
from model.routing import ReplayedRouting, RoutingCapture, RoutingLayout, decode_routed
from rollout.client import EngineClient
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams
from stages.common.rl_batches import train_batch

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41, 42], [7, 70, 7, 70, 7, 70, 7, 70, 7]]


@pytest.fixture(scope="module")
def checkpoint(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("routed") / "model"
    build_model("glm5-tiny", tokenizer, seed=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sampled(checkpoint, tmp_path, precision: str):
    engine = EngineProcess(str(checkpoint), tmp_path / f"engine-{precision}.log", seed=1, precision=precision)
    engine.launch()
    try:
        client = EngineClient(engine.wait_ready().base_url)
        sampling = SamplingParams(temperature=1.0, max_new_tokens=12, sampling_seed=5)
        return client.generate(PROMPTS * 4, sampling, routed_experts=True)
    finally:
        engine.stop()


def trainer(checkpoint):
    """The checkpoint as the RL trainer holds it: fp32, no dropout, sparse attention as the engine computes."""
    model = load_model(checkpoint).eval()
    install_dsa_indexers(model)
    set_dense_attention(model, dense=False)
    return model


def forward(model, batch, replayed: ReplayedRouting, replay: bool) -> tuple[torch.Tensor, float]:
    """The trainer's logprobs of the sampled tokens, and its routing agreement with the engine."""
    with replayed.replaying(batch.routed_experts, replay):
        logp = scored_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask)
    return logp.detach(), replayed.agreement()


def test_the_engine_returns_each_position_s_experts_in_sglang_s_layout(checkpoint, tokenizer, tmp_path):
    samples = sampled(checkpoint, tmp_path, "fp32")
    model = trainer(checkpoint)
    layout = RoutingLayout.of(model)
    assert layout is not None and 0 < len(layout.moe_layers) <= layout.num_layers
    for sample in samples:
        routed = decode_routed(sample.routed_experts, layout.num_layers, layout.top_k)
        # Every position the model ran, prompt and completion, but the last sampled token.
        assert routed.shape == (len(sample.prompt_ids) + len(sample.output_ids) - 1, layout.num_layers, layout.top_k)
        dense = [layer for layer in range(layout.num_layers) if layer not in layout.moe_layers]
        assert (routed[:, dense] == 0).all()  # SGLang's zeros where a layer does not route
        chosen = routed[:, list(layout.moe_layers)]
        assert ((chosen >= 0) & (chosen < model.config.num_local_experts)).all()
        assert all(len(set(row)) == layout.top_k for row in chosen.reshape(-1, layout.top_k).tolist())
    # The same weights in the same precision choose the same experts the trainer does, position by position.
    _, agreement = forward(model, train_batch(samples, tokenizer.pad_token_id, layout), ReplayedRouting(model), False)
    assert agreement >= 0.99


def test_replay_trains_through_the_bf16_engine_s_experts_and_narrows_the_logprob_gap(checkpoint, tokenizer, tmp_path):
    samples = sampled(checkpoint, tmp_path, "bf16")
    model = trainer(checkpoint)
    layout = RoutingLayout.of(model)
    batch = train_batch(samples, tokenizer.pad_token_id, layout)
    replayed = ReplayedRouting(model)
    used = RoutingCapture(model)  # after the replay's hook: what the layers were given
    used.recording = True

    def gap(logp):
        mask = batch.response_mask.bool()
        return float((logp - batch.logp_infer)[mask].abs().mean())

    own, agreement = forward(model, batch, replayed, replay=False)
    replayed_logp, agreement_again = forward(model, batch, replayed, replay=True)
    assert agreement == agreement_again  # the trainer's own choice is measured either way
    given = batch.routed_experts.reshape(-1, len(layout.moe_layers), layout.top_k)
    known = (given >= 0).all(dim=-1)
    for layer, chosen in enumerate(used.last()):
        assert torch.equal(chosen[known[:, layer]], given[known[:, layer]][:, layer])
    print(f"bf16 engine, fp32 trainer: routing agreement {agreement:.4f}; mean |logp gap| "
          f"{gap(own):.5f} without replay, {gap(replayed_logp):.5f} with")
    assert gap(replayed_logp) <= gap(own) + 1e-6
