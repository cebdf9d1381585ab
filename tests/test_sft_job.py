"""The SFT job as a real DeepSpeed process: resume after SIGKILL, committed checkpoint (ranks, ZeRO, precision: test_compute.py)."""

import os
import signal

import pytest
import torch
from transformers import AutoModelForCausalLM

from infra.store import open_store
from stages.common.events import parse_event
from tests.sft_fixtures import losses, router_biases, run_sft, small_config, start_sft

pytestmark = pytest.mark.slow


def test_sigkill_then_rerun_resumes_from_the_last_committed_step(small_store, tmp_path):
    config = small_config(small_store, "killed", checkpoint_every=3)
    process = start_sft(config, tmp_path)
    for line in process.stdout:  # wait for the step-3 commit, then kill mid-way to the next
        event = parse_event(line)
        if event and event["event"] == "step" and event["step"] == 4:
            os.kill(process.pid, signal.SIGKILL)
            break
    process.wait()
    assert process.returncode == -signal.SIGKILL
    store = open_store(small_store["root"])
    assert store.list_committed(config.resume_prefix) == [config.resume_prefix + "step-000003"]
    assert not store.is_committed(config.output_name)

    resumed = run_sft(config, tmp_path)
    assert [e for e in resumed if e["event"] == "resumed"][0]["step"] == 3
    assert [e["step"] for e in resumed if e["event"] == "step"] == list(range(4, 9))
    # Every committed name is a whole artifact; the partial step-6 never appears.
    assert store.list_committed(config.resume_prefix) == [config.resume_prefix + "step-000003",
                                                         config.resume_prefix + "step-000006"]
    uninterrupted = run_sft(small_config(small_store, "uninterrupted", checkpoint_every=3), tmp_path)
    assert losses(resumed) == pytest.approx(losses(uninterrupted)[3:], abs=1e-5)
    # The routers' biases, which balancing moves after every step, went on from where the resume state left them.
    biases = [router_biases(store, name, tmp_path) for name in (config.output_name, "checkpoints/sft/uninterrupted")]
    assert biases[0] and all(bias.abs().sum() > 0 for bias in biases[0])
    assert all(torch.equal(a, b) for a, b in zip(*biases, strict=True))


def test_final_checkpoint_is_a_hugging_face_directory_and_a_rerun_is_a_no_op(small_store, tmp_path):
    config = small_config(small_store, "final")
    events = run_sft(config, tmp_path)
    store = open_store(small_store["root"])
    artifact = store.open(config.output_name)
    files = set(artifact.manifest.files)
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.jsonl", "trainer_state.json"} <= files
    assert any(name.startswith("deepspeed/") for name in files)
    lineage = artifact.lineage()
    assert lineage["parents"][0]["uri"] == small_store["init"] and lineage["parents"][0]["role"] == "init"
    assert sorted(i["uri"] for i in lineage["inputs"]) == small_store["datasets"]
    model = AutoModelForCausalLM.from_pretrained(str(artifact.download(tmp_path / "final")), local_files_only=True)
    assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()
    again = run_sft(config, tmp_path)
    assert [e["event"] for e in again] == ["rank", "done"] and again[1]["already_committed"]
    assert events[-1]["checkpoint"] == again[1]["checkpoint"]
    # Timings stay out of the files: the same training under another name is the same content.
    twin = run_sft(config.model_copy(update={"output_name": config.output_name + "-twin"}), tmp_path)
    assert any("tokens_per_s" in event for event in twin if event["event"] == "step")
    assert store.open(twin[-1]["checkpoint"]).digest == artifact.digest
