"""SGLang's own server as a rollout engine (`engines.backend: sglang`): `python -m sglang.launch_server` per replica.

What it gives over the built-in engine on GPUs: paged KV cache, radix prefix cache, CUDA graphs, tensor and data
parallelism. It speaks the same contract the trainers already use (token ids in and out, `meta_info` logprobs and
routed experts, the weight-update endpoints), so only the start differs:
- the settings become SGLang's flags (`server_args`), checked in the tests against the flags the pinned SGLang
  defines (its `sglang/srt/arg_groups/fields`, read as source: importing SGLang needs its CUDA dependencies);
- token in, token out (`--skip-tokenizer-init`): the trainer trains on exactly the sampled ids;
- each position's routed experts on request (`--enable-return-routed-experts`: routing agreement and replay);
- DSA's keys selected by the trainer's rule (`DSA_TOPK_FLAGS`, `DSA_TOPK_ENV`), sparse at every length;
- the kernel's parent-death signal, since SGLang is not our code (`infra.lifetime.die_with_parent`): SIGTERM,
  on which SGLang stops its scheduler and detokenizer processes too;
- a machine without CUDA is refused before anything starts, naming the field.

SGLang is an optional extra (`pip install .[sglang]`), never a core dependency.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from model.device import torch_dtype
from model.precision import Precision
from rollout.auth import api_key
from rollout.client import EngineClient
from rollout.engine_settings import EngineSettings
from rollout.process import ServiceProcess, ready_client, stop_serving
from rollout.served_checkpoint import local_checkpoint

SGLANG_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
# DSA's key selection as our trainer makes it (model/dsa.py `stable_topk`: among keys scoring as the k-th, the most
# recent). SGLang's default top-k kernel leaves ties unspecified; FlashInfer's radix top-k takes a tie-break, and
# "large" (the larger key index) is ours. Deterministic, so a sequence selects alike in every batch. Prefill attends
# sparse at every length: by default SGLang's prefill runs dense attention up to 2,048 keys, which is not what a
# model trained sparse computes past its top-k. (The environment is read by SGLang's `srt/environ.py`; the same
# tie-break and determinism are what public true-on-policy recipes for GLM-5 on Miles give SGLang.)
DSA_TOPK_FLAGS = ["--dsa-topk-backend", "flashinfer"]
DSA_TOPK_ENV = {"SGLANG_DSA_TOPK_FLASHINFER_TIE_BREAK": "large", "SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC": "1",
                "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "0"}
# Loading a large checkpoint and capturing CUDA graphs takes minutes.
SGLANG_STARTUP_TIMEOUT_S = 1800.0


def require_cuda(settings: EngineSettings) -> None:
    """`backend: sglang` on a machine without CUDA stops here, before any process starts."""
    if settings.backend == "sglang" and not torch.cuda.is_available():
        raise ValueError("engines.backend: sglang serves on CUDA GPUs and this machine has none "
                         "(torch.cuda.is_available() is False); use engines.backend: builtin here")


def server_args(settings: EngineSettings, checkpoint_dir: str, *, seed: int, precision: Precision,
                weight_version: str = "0", key: str | None = None, workdir: Path | None = None) -> list[str]:
    """SGLang's command-line flags for one replica serving `checkpoint_dir` (host and port are added by the
    process that starts it). `key`: the API key it requires of every request (default: ours, if set); `workdir`:
    where a file the flags name is written (speculate_by_batch_size's)."""
    args = ["--model-path", checkpoint_dir, "--dtype", SGLANG_DTYPES[torch_dtype(precision)],
            "--random-seed", str(seed), "--skip-tokenizer-init", "--enable-return-routed-experts",
            "--weight-version", weight_version, "--tp-size", str(settings.tp_size), "--dp-size", str(settings.dp_size),
            *DSA_TOPK_FLAGS]
    if settings.mem_fraction_static is not None:
        args += ["--mem-fraction-static", str(settings.mem_fraction_static)]
    if settings.deterministic:
        args.append("--enable-deterministic-inference")
    if settings.speculative_steps:  # GLM-5's MTP layer as the draft: one chain of draft tokens, verified at once
        args += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(settings.speculative_steps),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(settings.speculative_steps + 1)]
        if settings.speculative_max_rows is not None:
            args += speculate_by_batch_size(settings, workdir)
    token = api_key() if key is None else key
    if token:
        args += ["--api-key", token]
    return args


def speculate_by_batch_size(settings: EngineSettings, workdir: Path | None) -> list[str]:
    """`speculative_max_rows` as SGLang's adaptive speculation: its tiers map a running batch's size to the draft
    steps of the largest tier at or below it; ours are fixed, each with one candidate (no acceptance-driven change)."""
    if workdir is None:
        raise ValueError("engines.speculative_max_rows: SGLang reads its batch-size tiers from a file; give a workdir")
    tiers = {"1": {"candidate_steps": [settings.speculative_steps]},
             str(settings.speculative_max_rows + 1): {"candidate_steps": [0]}}
    path = workdir / "speculative-tiers.json"
    path.write_text(json.dumps(tiers))
    return ["--speculative-adaptive", "--speculative-adaptive-config", str(path)]


class SglangServerProcess:
    """One SGLang server replica, with `EngineProcess`'s interface (launch, wait_ready, stop, url)."""

    def __init__(self, settings: EngineSettings, checkpoint: str, log_path: Path, *, seed: int,
                 precision: Precision, host: str = "127.0.0.1"):
        """`checkpoint`: a committed artifact URI (downloaded at launch, into a folder removed at stop) or a
        local directory."""
        require_cuda(settings)
        self.settings, self.checkpoint, self.seed, self.precision = settings, checkpoint, seed, precision
        self.service = ServiceProcess("sglang.launch_server", [], log_path, host=host,
                                      startup_timeout_s=SGLANG_STARTUP_TIMEOUT_S, foreign=True, env=DSA_TOPK_ENV)
        self.downloads: Path | None = None

    @property
    def url(self) -> str:
        return self.service.url

    def launch(self) -> None:
        self.downloads = Path(tempfile.mkdtemp(prefix="posttrain-sglang-"))
        local = local_checkpoint(self.checkpoint, self.downloads)
        self.service.args = server_args(self.settings, str(local), seed=self.seed, precision=self.precision,
                                        workdir=self.downloads)
        self.service.launch()

    def wait_ready(self) -> EngineClient:
        return ready_client(self.service, self.stop, self.checkpoint)

    def stop(self) -> None:
        stop_serving(self.service, self.downloads)
