"""The JSON document of one part of bench/gpu_check.sh, from the files its steps left in $SCRATCH: each step's own
JSON, or its exit code, time and log's end where it failed or timed out."""

from __future__ import annotations

import json
import os
from pathlib import Path

scratch = Path(os.environ["SCRATCH"])


def result(name: str, written: str | None = None):
    """A step's JSON (its output, or the file it wrote), or why there is none."""
    if not (scratch / f"{name}.rc").exists():
        return {"ran": False}
    code, seconds = int((scratch / f"{name}.rc").read_text()), int((scratch / f"{name}.seconds").read_text())
    log = (scratch / f"{name}.log").read_text(errors="replace")
    try:
        parsed = json.loads((scratch / written).read_text() if written else log[log.index("{"):])
    except (OSError, ValueError):
        parsed = None
    if code == 0 and parsed is not None:
        return parsed
    return {"exit_code": code, "timed_out": code == 124, "seconds": seconds, "partial": parsed, "log_tail": log[-1500:]}


def core() -> dict:
    summaries = sorted((scratch / "runs").glob("*/summary.json"))
    smoke_code = int((scratch / "smoke.rc").read_text())
    gpu, cpu = result("losses_gpu"), result("losses_cpu")
    losses: dict = {"gpu": gpu, "cpu": cpu}
    if "losses" in gpu and "losses" in cpu:
        relative = [abs(g - c) / abs(c) for g, c in zip(gpu["losses"], cpu["losses"], strict=True)]
        losses = {"gpu": gpu["losses"], "cpu": cpu["losses"], "max_relative_difference": max(relative),
                  "tolerance": 1e-3, "within": max(relative) <= 1e-3}
    return {
        "smoke_pipeline": {"exit_code": smoke_code, "wall_s": int((scratch / "smoke.seconds").read_text()),
                           "stages": [s["stage"] for s in json.loads(summaries[-1].read_text())["stages"]]
                           if summaries else [],
                           "log_tail": (scratch / "smoke.log").read_text(errors="replace")[-1500:] if smoke_code else ""},
        "sft_glm5_small_bf16": result("sft"),
        "decode_glm5_small": result("decode"),
        "moe_experts_glm5_small_bf16": result("moe", "moe.json"),
        "fp32_losses_gpu_vs_cpu": losses,
    }


def rl() -> dict:
    return {"prepare_glm5_small": result("prepare"), "rl_engines_glm5_small": result("rl_engines", "rl_engines.json")}


print(json.dumps(core() if os.environ["PART"] == "core" else rl(), indent=2))
