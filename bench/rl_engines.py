"""A reasoning RL stage of a few steps on each rollout backend: the trainer's logprobs against the engine's, per step.

bench/gpu_check.sh runs it on the GPU machine: the built-in engine (`engines.backend: builtin`) and SGLang's own
server (`engines.backend: sglang`, `pip install -e '.[sglang]'`), each serving the checkpoint and taking the
trainer's weights after every step by broadcast (`weight_sync: distributed`: SGLang's
`update_weights_from_distributed`). Both arms run the same stage job, config and seed, one after the other. Per
step: the mean and largest |log π_train − log π_infer| over the sampled tokens (`logp_gap_mean`, `logp_gap_max`),
IcePop's masked fraction (`pop_masked_fraction`: tokens whose ratio falls outside its band, which train nothing),
the routing agreement, the reward and the generate / train / push seconds. A backend that cannot run here is in the
document with the reason (SGLang without CUDA, or not installed), never left out.

    .venv/bin/python bench/rl_engines.py --store S [--checkpoint init:latest --dataset arith:latest --steps 4
                                                   --backends builtin sglang --out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlsplit

import torch

# Run as a script (`python bench/rl_engines.py`), its folder is on sys.path, not the repository's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import machine  # noqa: E402
from infra.launch import StageFailed, run_stage_job  # noqa: E402
from infra.launchers.local import LocalLaunch  # noqa: E402
from infra.references import resolve_checkpoint, resolve_dataset  # noqa: E402
from infra.store import open_store  # noqa: E402
from stages.common.events import parse_event  # noqa: E402
from stages.grpo.config import ReasoningRlConfig  # noqa: E402

STEP_FIGURES = ("logp_gap_mean", "logp_gap_max", "pop_masked_fraction", "routing_agreement", "reward_mean",
                "response_length", "generate_s", "train_s", "push_s", "weight_version")


def unavailable(backend: str) -> str | None:
    """Why `backend` cannot serve on this machine, or None."""
    if backend != "sglang":
        return None
    if not torch.cuda.is_available():
        return "SGLang's server needs a CUDA GPU; this machine has none"
    if find_spec("sglang") is None:
        return "SGLang is not installed: uv pip install -e '.[sglang]'"
    # Installed is not importable: its CUDA dependencies (sgl_kernel, flashinfer, triton) may be missing.
    check = subprocess.run([sys.executable, "-c", "import sglang.launch_server"], capture_output=True, text=True,
                           timeout=300)
    if check.returncode:
        return f"SGLang does not import here: {check.stderr.strip()[-1500:]}"
    return None


def run_backend(store_root: Path, checkpoint: str, dataset: str, backend: str, steps: int) -> dict:
    """The stage job on a scratch copy of the inputs (the bench writes nothing into the store it reads)."""
    with tempfile.TemporaryDirectory(prefix=f"rl-engines-{backend}-") as tmp:
        root = Path(tmp) / "store"
        uris = []
        for uri in (checkpoint, dataset):
            name = uri.removeprefix(open_store(str(store_root)).root_uri).strip("/")
            shutil.copytree(store_root / name, root / name)
            uris.append(open_store(str(root)).open(name).uri)
        config = ReasoningRlConfig(
            run_id=f"rl-engines-{backend}", store=str(root), init_checkpoint=uris[0], datasets=[uris[1]],
            max_steps=steps, prompts_per_step=4, group_size=8, sampling={"max_new_tokens": 64}, optimizer={"warmup_steps": 0},
            dynamic_sampling={"enabled": False}, checkpoint_every=10_000,
            engines={"backend": backend, "weight_sync": "distributed",
                     # SGLang takes most of the GPU by default; the trainer shares it here.
                     **({"mem_fraction_static": 0.45} if backend == "sglang" else {})})
        path = Path(tmp) / "run.json"
        path.write_text(config.model_dump_json())
        steps_seen: list[dict] = []

        def on_line(line: str) -> None:
            event = parse_event(line)
            if event and event.get("event") == "step":
                steps_seen.append({key: event.get(key) for key in ("step", *STEP_FIGURES)})

        try:
            run_stage_job(LocalLaunch(nproc=1), "stages.grpo.reasoning", path, on_line)
        except StageFailed as failure:
            return {"failed": str(failure)[-2000:], "steps": steps_seen}
    return {"steps": steps_seen,
            "logp_gap_max": max((s["logp_gap_max"] or 0.0) for s in steps_seen) if steps_seen else None,
            "pop_masked_fraction_mean": sum(s["pop_masked_fraction"] or 0.0 for s in steps_seen) / len(steps_seen)
            if steps_seen else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a local store holding the checkpoint and an arith dataset")
    parser.add_argument("--checkpoint", default="init:latest")
    parser.add_argument("--dataset", default="arith:latest")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--backends", nargs="+", default=["builtin", "sglang"], choices=["builtin", "sglang"])
    parser.add_argument("--out", type=Path, help="also write the JSON document here")
    args = parser.parse_args()
    host = machine()
    store = open_store(args.store)
    if not store.root_uri.startswith("file://"):
        raise SystemExit(f"--store: {args.store} is not a folder on this machine")
    checkpoint = resolve_checkpoint(store, args.checkpoint, "--checkpoint")
    dataset = resolve_dataset(store, args.dataset, "--dataset")
    root = Path(urlsplit(store.root_uri).path)
    arms: dict[str, dict] = {}

    def document() -> str:
        return json.dumps({"bench": "rl_engines", "checkpoint": checkpoint, "dataset": dataset, "steps": args.steps,
                           "weight_sync": "distributed", "machine": host, "arms": arms}, indent=2)

    for backend in args.backends:
        reason = unavailable(backend)
        arms[backend] = {"unavailable": reason} if reason else run_backend(root, checkpoint, dataset, backend, args.steps)
        if args.out:  # after each arm: a run cut short still leaves the arms it finished
            args.out.write_text(document() + "\n")
    print(document())


if __name__ == "__main__":
    main()
