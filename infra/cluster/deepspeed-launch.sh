#!/usr/bin/env bash
# Run one stage as a multi-node DeepSpeed job from a run.json (the same file a Prefect flow writes
# to runs/<run_id>/run.json, or one you write from the stage's config class).
#   infra/cluster/deepspeed-launch.sh stages.grpo.reasoning runs/<run_id>/run.json [hostfile]
# Every rank runs the same stage code as on a laptop; rank 0 commits checkpoints to the store.
set -euo pipefail
module="$1"; config="$2"; hostfile="${3:-infra/cluster/hostfile}"
cd "$(dirname "$0")/../.."
: "${POSTTRAIN_STORE:?set POSTTRAIN_STORE to the shared artifact store, e.g. s3://bucket/posttrain}"
# DeepSpeed forwards these to every node (see .deepspeed_env in DeepSpeed's docs for more).
printf 'POSTTRAIN_STORE=%s\nWANDB_MODE=%s\n' "$POSTTRAIN_STORE" "${WANDB_MODE:-offline}" > .deepspeed_env
exec .venv/bin/deepspeed --hostfile "$hostfile" --module "$module" --config "$config"
