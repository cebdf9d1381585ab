#!/usr/bin/env bash
# The GPU check: one script in two parts, a JSON document each, together about 8-12 minutes on one H100 or H200.
#   1. the smoke pipeline end to end on CUDA (every stage; bf16, the GPU default);
#   2. SFT tokens/s and model FLOPs utilisation of glm5-small in bf16 (bench/sft_throughput.py);
#   3. the rollout engine's decode tokens/s against transformers' generate on the GPU (bench/rollout_throughput.py);
#   4. the MoE experts' kernels, forward + backward tokens/s of glm5-small in bf16 (bench/moe_experts.py), which
#      `compute.experts_kernel: auto` follows on a GPU;
#   5. the first 5 SFT losses in fp32 on the GPU against the CPU: same weights, same batches. Tolerance:
#      1e-3 relative. fp32 on both (no TF32), but the GPU's kernels sum in another order, and Adam turns
#      rounding in a near-zero gradient into a visible difference within a few steps;
#   6. glm5-small through 4 reasoning RL steps on each rollout backend, the built-in engine and SGLang's own
#      server (`engines.backend: sglang`), weights broadcast after every step (over gloo: an engine started beside
#      the trainer may share its GPU, which NCCL refuses): per step the trainer's logprob gap
#      to the engine's and IcePop's masked fraction (bench/rl_engines.py). SGLang must be in the .venv already
#      (`uv pip install -e '.[sglang]'`: the GPU machine may have no network); without it the arm says so.
# Needs the project's .venv with a CUDA build of torch (`make venv` on a GPU machine, see the Makefile).
# Two parts, each under 10 minutes, each printing its own JSON document (the machine may limit a command's time):
#   bash bench/gpu_check.sh core > gpu_check_core.json   # steps 1-5
#   bash bench/gpu_check.sh rl > gpu_check_rl.json       # step 6
# A step that fails is in the document with its exit code and its log's end; the others still run. Every step's
# files are kept under $GPU_CHECK_DIR (default: a new folder under /tmp, named on stderr) whatever happens.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-}
case "$part" in core|rl) ;; *) echo "usage: bash bench/gpu_check.sh core|rl" >&2; exit 2 ;; esac
PY=.venv/bin/python
export HF_HUB_OFFLINE=1 WANDB_MODE=offline DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false TOKENIZERS_PARALLELISM=false
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: torch sees no CUDA device')" || exit 1
scratch=${GPU_CHECK_DIR:-$(mktemp -d /tmp/gpu-check-XXXXXX)}
mkdir -p "$scratch"
echo "gpu_check: files in $scratch" >&2
export POSTTRAIN_WORKDIR="$scratch/work" PREFECT_HOME="$scratch/prefect"

# step NAME SECONDS COMMAND...: runs COMMAND with its output in $scratch/NAME.log, its exit code in NAME.rc.
step() {
  local name=$1 seconds=$2 started
  shift 2
  started=$(date +%s)
  timeout "$seconds" "$@" > "$scratch/$name.log" 2>&1
  echo $? > "$scratch/$name.rc"
  echo $(( $(date +%s) - started )) > "$scratch/$name.seconds"
}

if [ "$part" = core ]; then
  step smoke 240 $PY -m posttrain.cli pipeline --preset smoke --store "$scratch/store" --reports "$scratch/runs"
  step sft 90 $PY bench/sft_throughput.py --model glm5-small --precision bf16 --batch 64 --rounds 3 --steps 10
  step decode 90 $PY bench/rollout_throughput.py --model glm5-small --batch 64 --prompt-len 64 --new-tokens 128 --rounds 3
  step moe 60 $PY bench/moe_experts.py --presets glm5-small --batch 16 --seq 512 --rounds 3 --out "$scratch/moe.json"
  step losses_gpu 30 $PY bench/sft_throughput.py --losses --steps 5 --precision fp32
  CUDA_VISIBLE_DEVICES="" step losses_cpu 30 $PY bench/sft_throughput.py --losses --steps 5 --precision fp32
else
  step prepare 60 $PY -m posttrain.cli prepare --preset glm5-small --store "$scratch/small"
  step rl_engines 480 $PY bench/rl_engines.py --store "$scratch/small" --steps 4 --out "$scratch/rl_engines.json"
fi

SCRATCH="$scratch" PART="$part" $PY bench/gpu_check_summary.py
