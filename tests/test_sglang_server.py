"""`engines.backend: sglang` offline: the command line we start SGLang's server with is one the pinned SGLang
accepts (its flags as its source declares them: importing its server arguments needs its CUDA dependencies), and
on a machine without CUDA the choice is refused by name before anything starts."""

import ast
import json
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from model.dsa import stable_topk
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from rollout.sglang_server import DSA_TOPK_ENV, server_args
from tests.sglang_types import server_flags, sglang_root


def check_command_line(args: list[str]) -> dict[str, str | None]:
    """Every token of `args` read as SGLang's parser would: a known flag, a switch without a value, a value of the
    flag's type and among its choices. Returns {flag: value}."""
    flags, parsed, index = server_flags(), {}, 0
    while index < len(args):
        name = args[index]
        assert name in flags, f"{name} is not a flag of SGLang's server"
        flag = flags[name]
        if flag.switch:
            parsed[name], index = None, index + 1
            continue
        value = args[index + 1]
        assert not value.startswith("--"), f"{name} needs a value"
        if flag.value_type.removeprefix("Optional[").removesuffix("]") in ("int", "float"):
            float(value)
        if flag.choices is not None:
            assert value in flag.choices, f"{name} {value}: not among {flag.choices}"
        parsed[name], index = value, index + 2
    return parsed


def test_the_source_declares_the_flags_the_check_reads():
    flags = server_flags()
    assert flags["--skip-tokenizer-init"].switch and not flags["--port"].switch and flags["--port"].value_type == "int"
    assert "bfloat16" in flags["--dtype"].choices  # a flag with choices, read from Arg(choices=[...])


@pytest.mark.parametrize("settings,precision,key", [
    (EngineSettings(backend="sglang"), "auto", None),
    (EngineSettings(backend="sglang", tp_size=4, dp_size=2, mem_fraction_static=0.8, deterministic=False), "bf16",
     "a-token"),
    (EngineSettings(backend="sglang", replicas=2, speculative_steps=3), "fp32", ""),
    (EngineSettings(backend="sglang", speculative_steps=3, speculative_max_rows=16), "bf16", None),
])
def test_the_server_s_command_line_is_one_sglang_accepts(settings, precision, key, tmp_path):
    args = server_args(settings, "/checkpoints/rl", seed=7, precision=precision, key=key, workdir=tmp_path)
    parsed = check_command_line([*args, "--host", "127.0.0.1", "--port", "30000"])
    assert parsed["--model-path"] == "/checkpoints/rl" and parsed["--random-seed"] == "7"
    assert parsed["--dtype"] == {"auto": "bfloat16" if torch.cuda.is_available() else "float32", "bf16": "bfloat16",
                                 "fp32": "float32"}[precision]
    # Token ids in and out, and each position's experts on request: what the trainers read.
    assert {"--skip-tokenizer-init", "--enable-return-routed-experts"} <= set(parsed)
    assert parsed["--tp-size"] == str(settings.tp_size) and parsed["--dp-size"] == str(settings.dp_size)
    assert ("--enable-deterministic-inference" in parsed) == settings.deterministic
    assert parsed.get("--mem-fraction-static") == (None if settings.mem_fraction_static is None
                                                   else str(settings.mem_fraction_static))
    assert parsed.get("--api-key") == (key or None)
    assert parsed["--dsa-topk-backend"] == "flashinfer"  # the top-k that takes a tie-break (below)
    # The MTP layer drafts: one chain of `speculative_steps` tokens, verified with the token before them.
    steps = settings.speculative_steps
    assert (parsed.get("--speculative-algorithm"), parsed.get("--speculative-num-steps"),
            parsed.get("--speculative-eagle-topk"), parsed.get("--speculative-num-draft-tokens")) == (
        ("EAGLE", str(steps), "1", str(steps + 1)) if steps else (None, None, None, None))
    # Speculating only up to a batch size: SGLang's adaptive tiers, the largest at or below a batch's size applying.
    assert ("--speculative-adaptive" in parsed) == (settings.speculative_max_rows is not None)
    if settings.speculative_max_rows is not None:
        tiers = {int(size): tier["candidate_steps"] for size, tier in
                 json.loads(Path(parsed["--speculative-adaptive-config"]).read_text()).items()}
        for batch in range(1, 4 * settings.speculative_max_rows):  # the tier SGLang picks: the largest at or below
            expected = [settings.speculative_steps] if batch <= settings.speculative_max_rows else [0]
            assert tiers[max(size for size in tiers if size <= batch)] == expected, batch


def test_a_flag_sglang_does_not_define_fails_the_check():
    with pytest.raises(AssertionError, match="--tensor-parallel"):
        check_command_line(["--tensor-parallel", "2"])
    with pytest.raises(AssertionError, match="not among"):
        check_command_line(["--dtype", "bf16"])


def test_sglang_without_cuda_is_refused_naming_the_field_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this machine, on any machine
    with ExitStack() as stack, pytest.raises(ValueError, match="engines.backend: sglang serves on CUDA GPUs"):
        launch_engines(stack, EngineSettings(backend="sglang", replicas=2), "file:///nowhere/rl", tmp_path, seed=0)
    assert not list(tmp_path.iterdir())  # no replica started, no log opened


def test_sglang_s_settings_are_refused_on_the_builtin_engine():
    with pytest.raises(ValidationError, match="engines.tp_size is a setting of backend sglang"):
        EngineSettings(tp_size=2)


def test_sglang_selects_dsa_keys_by_the_trainers_rule():
    """The variables the server starts with are ones the pinned SGLang reads, with values it accepts: FlashInfer's
    top-k preferring the larger key index among keys scoring as the k-th (its TopKTieBreak.LARGE, 2), which is
    `stable_topk`'s rule; deterministic; prefill sparse at every length."""
    environ = ast.parse((sglang_root() / "srt" / "environ.py").read_text())
    declared = {target.id for node in ast.walk(environ) if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    assert set(DSA_TOPK_ENV) <= declared
    backend = ast.parse((sglang_root() / "srt" / "layers" / "attention" / "dsa" / "dsa_topk_backend.py").read_text())
    (tie_breaks,) = [ast.literal_eval(node.value) for node in ast.walk(backend) if isinstance(node, ast.Assign)
                     and getattr(node.targets[0], "id", "") == "_FLASHINFER_TIE_BREAK_VALUES"]
    assert tie_breaks[DSA_TOPK_ENV["SGLANG_DSA_TOPK_FLASHINFER_TIE_BREAK"]] == 2
    assert DSA_TOPK_ENV["SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"] == "0"
    # Ours: of six keys where four tie at the k-th score, the k = 3 selected are the top one and the two newest ties.
    scores = torch.tensor([[0.0, 5.0, 0.0, 0.0, 0.0, -1.0]])
    assert stable_topk(scores, 3).tolist() == [[1, 3, 4]]
