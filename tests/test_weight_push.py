"""SGLang's distributed weight update between a trainer and two of our engines (gloo on the CPU): the
engines serve exactly the trainer's weights, as if freshly loaded from them, and the requests have
SGLang's own shapes."""

import pytest
import requests
import torch
from transformers import AutoModelForCausalLM

from infra.ports import free_port
from model.dsa import install_dsa_indexers
from model.moe_balance import routers
from model.presets import build_model
from rollout.client import scoring_payload
from rollout.process import EngineProcess
from rollout.protocol import InitWeightsUpdateGroup, UpdateWeightsFromDistributed
from rollout.weight_push import BUCKET_BYTES, DistributedWeightPush, weight_payload
from tests.sglang_types import request_fields

BATCH = [[11, 12, 13, 14, 15, 16, 17, 18], [40, 41, 42, 43, 44], [7, 70, 700, 7, 70, 700, 7]]


def steered(model):
    """`model` with its routers' biases set far from 0: every token goes to the even experts."""
    for router in routers(model):
        bias = router.e_score_correction_bias
        bias.copy_(torch.arange(bias.numel()) % 2 * -2.0 + 1.0)
    return model


def scores(url):
    answer = requests.post(f"{url}/generate", json=scoring_payload(BATCH), timeout=60)
    answer.raise_for_status()
    return [[lp for lp, _, _ in o["meta_info"]["input_token_logprobs"][1:]] for o in answer.json()], \
        answer.json()[0]["meta_info"]["weight_version"]


@pytest.mark.parametrize(("ours", "theirs"), [
    (InitWeightsUpdateGroup, "InitWeightsUpdateGroupReqInput"),
    (UpdateWeightsFromDistributed, "UpdateWeightsFromDistributedReqInput"),
])
def test_the_requests_have_sglangs_fields(ours, theirs):
    sglang = request_fields("srt/managers/io_struct.py", theirs)
    assert set(ours.model_fields) <= set(sglang)
    assert {name for name, field in ours.model_fields.items() if field.is_required()} == \
        {name for name, required in sglang.items() if required}


@pytest.mark.parametrize("bucket_bytes", [BUCKET_BYTES, 0], ids=["one bucket", "a tensor per broadcast"])
def test_two_engines_serve_the_trainers_weights_as_if_loaded_from_them(tokenizer, tmp_path, bucket_bytes):
    for name, seed in (("old", 1), ("trained", 2)):
        model = build_model("glm5-tiny", tokenizer, seed=seed)
        if name == "trained":  # with the routers' biases balancing moved (a buffer, not a parameter)
            steered(model)
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    trainer = steered(build_model("glm5-tiny", tokenizer, seed=2))  # the "trained" weights, in the trainer's process
    install_dsa_indexers(trainer)
    # The biases change what the model computes, and plain transformers loads them from the saved files.
    plain = build_model("glm5-tiny", tokenizer, seed=2)
    ids = torch.tensor([BATCH[0]])
    assert not torch.allclose(plain(ids).logits, trainer(ids).logits, atol=1e-3)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "trained")
    assert all(torch.equal(a.e_score_correction_bias, b.e_score_correction_bias)
               for a, b in zip(routers(loaded), routers(trainer), strict=True))
    engines = [EngineProcess(str(tmp_path / "old"), tmp_path / f"engine-{i}.log", seed=i) for i in range(2)]
    fresh = EngineProcess(str(tmp_path / "trained"), tmp_path / "fresh.log")
    for engine in [*engines, fresh]:
        engine.launch()
    try:
        urls = [engine.wait_ready().base_url for engine in engines]
        expected, _ = scores(fresh.wait_ready().base_url)
        before, _ = scores(urls[0])
        assert max(abs(a - b) for x, y in zip(before, expected, strict=True) for a, b in zip(x, y, strict=True)) > 1e-3

        push = DistributedWeightPush(urls, backend="gloo", master_address="127.0.0.1", master_port=free_port())
        try:
            # One tensor sent in bf16 (the final norm's ones, exact in it): in a bucket it follows the float32 ones,
            # at an offset its dtype can start at, and the engine converts it into its float32 parameter.
            state = trainer.state_dict() | {"model.norm.weight": trainer.model.norm.weight.detach().to(torch.bfloat16)}
            push.push(weight_payload(state.items(), "7", bucket_bytes))
        finally:
            push.close()
        for url in urls:
            served, version = scores(url)
            assert version == "7"
            for row, reference in zip(served, expected, strict=True):
                assert row == pytest.approx(reference, abs=1e-6)
        never_joined = requests.post(f"{urls[0]}/update_weights_from_distributed", timeout=30, json={
            "names": ["lm_head.weight"], "dtypes": ["float32"], "shapes": [[1, 1]], "group_name": "nobody"})
        assert never_joined.status_code == 400 and "init_weights_update_group" in never_joined.text
    finally:
        for engine in [*engines, fresh]:
            engine.stop()
