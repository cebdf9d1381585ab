#!/usr/bin/env bash
# The GPU check: one script, one JSON document on stdout, about 8-12 minutes on one H100 or H200.
#   1. the smoke pipeline end to end on CUDA (every stage; bf16, the GPU default);
#   2. SFT tokens/s and model FLOPs utilisation of glm5-small in bf16 (bench/sft_throughput.py);
#   3. the rollout engine's decode tokens/s against transformers' generate on the GPU (bench/rollout_throughput.py);
#   4. the MoE experts' kernels, forward + backward tokens/s of glm5-small in bf16 (bench/moe_experts.py), which
#      `compute.experts_kernel: auto` follows on a GPU;
#   5. the first 5 SFT losses in fp32 on the GPU against the CPU: same weights, same batches. Tolerance:
#      1e-3 relative. fp32 on both (no TF32), but the GPU's kernels sum in another order, and Adam turns
#      rounding in a near-zero gradient into a visible difference within a few steps;
#   6. glm5-small through 4 reasoning RL steps on each rollout backend, the built-in engine and SGLang's own
#      server (`engines.backend: sglang`), weights broadcast after every step: per step the trainer's logprob gap
#      to the engine's and IcePop's masked fraction (bench/rl_engines.py). SGLang must be in the .venv already
#      (`uv pip install -e '.[sglang]'`: the GPU machine may have no network); without it the arm says so.
# Needs the project's .venv with a CUDA build of torch (`make venv` on a GPU machine, see the Makefile).
#   bash bench/gpu_check.sh > gpu_check.json
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 WANDB_MODE=offline DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false TOKENIZERS_PARALLELISM=false
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA device')"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

started=$(date +%s)
if POSTTRAIN_WORKDIR="$scratch/work" PREFECT_HOME="$scratch/prefect" timeout 300 .venv/bin/posttrain pipeline \
    --preset smoke --store "$scratch/store" --reports "$scratch/runs" > "$scratch/pipeline.log" 2>&1; then smoke=0; else smoke=$?; fi
smoke_s=$(( $(date +%s) - started ))

$PY bench/sft_throughput.py --model glm5-small --precision bf16 --batch 64 --rounds 3 --steps 10 > "$scratch/sft.json"
$PY bench/rollout_throughput.py --model glm5-small --batch 64 --prompt-len 64 --new-tokens 128 --rounds 3 > "$scratch/decode.json"
$PY bench/moe_experts.py --presets glm5-small --batch 16 --seq 512 --rounds 3 --out "$scratch/moe.json" > /dev/null
$PY bench/sft_throughput.py --losses --steps 5 --precision fp32 > "$scratch/losses_gpu.json"
CUDA_VISIBLE_DEVICES="" $PY bench/sft_throughput.py --losses --steps 5 --precision fp32 > "$scratch/losses_cpu.json"
.venv/bin/posttrain prepare --preset glm5-small --store "$scratch/small" > "$scratch/prepare.log" 2>&1
if POSTTRAIN_WORKDIR="$scratch/work" timeout 900 $PY bench/rl_engines.py --store "$scratch/small" --steps 4 \
    --out "$scratch/rl_engines.json" > "$scratch/rl_engines.log" 2>&1; then :; else
  echo "{\"exit_code\": $?, \"log_tail\": $($PY -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()[-1500:]))' "$scratch/rl_engines.log")}" > "$scratch/rl_engines.json"
fi

SCRATCH="$scratch" SMOKE="$smoke" SMOKE_S="$smoke_s" $PY - <<'EOF'
import json, os
from pathlib import Path

scratch = Path(os.environ["SCRATCH"])
read = lambda name: json.loads((scratch / name).read_text())
gpu, cpu = read("losses_gpu.json")["losses"], read("losses_cpu.json")["losses"]
relative = [abs(g - c) / abs(c) for g, c in zip(gpu, cpu, strict=True)]
summaries = sorted((scratch / "runs").glob("*/summary.json"))
print(json.dumps({
    "smoke_pipeline": {"exit_code": int(os.environ["SMOKE"]), "wall_s": int(os.environ["SMOKE_S"]),
                       "stages": [s["stage"] for s in json.loads(summaries[-1].read_text())["stages"]] if summaries else [],
                       "log_tail": (scratch / "pipeline.log").read_text()[-1500:] if os.environ["SMOKE"] != "0" else ""},
    "sft_glm5_small_bf16": read("sft.json"),
    "decode_glm5_small": read("decode.json"),
    "moe_experts_glm5_small_bf16": read("moe.json"),
    "fp32_losses_gpu_vs_cpu": {"gpu": gpu, "cpu": cpu, "max_relative_difference": max(relative),
                               "tolerance": 1e-3, "within": max(relative) <= 1e-3},
    "rl_engines_glm5_small": read("rl_engines.json"),
}, indent=2))
EOF
