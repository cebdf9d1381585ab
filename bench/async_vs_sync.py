"""Trained samples per second of agentic RL, fully asynchronous against synchronous, in one run.

Both modes train the same tiny model on the same tasks (search and calc) for the same number of
steps (the same number of trained samples), against task services whose every step waits a seeded
lognormal delay (median `--latency-median-s`, shape `--latency-sigma`: with sigma 1.5 about one
step in twenty waits more than 12× the median). Synchronous mode starts a batch's rollouts and
waits for the slowest before training; asynchronous mode keeps `--in-flight` groups generating
while the trainer trains on whichever have finished.

    .venv/bin/python bench/async_vs_sync.py [--steps 8 --latency-median-s 0.2 --latency-sigma 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from data_prep.prepare import prepare
from infra.launch import run_stage_job
from infra.launchers.local import LocalLaunch
from infra.store import open_store
from stages.agentic.config import AgenticRlConfig
from stages.common.events import parse_event
from suites.prepare import SuiteSizes


def run_mode(mode: str, store: dict, args, workdir: Path) -> dict:
    config = AgenticRlConfig(
        run_id=f"bench-{mode}", store=store["root"], init_checkpoint=store["init"], datasets=store["datasets"],
        mode=mode, max_steps=args.steps, group_size=args.group_size, groups_per_step=args.groups_per_step,
        max_in_flight_groups=args.in_flight, engines={"replicas": 2}, sampling={"max_new_tokens": 16},
        episode={"max_turns": 3, "max_context": 512, "discard_above": 480}, env_latency_median_s=args.latency_median_s, env_latency_sigma=args.latency_sigma,
        staleness_tau=args.steps, checkpoint_every=10_000,
    )
    path = workdir / f"{mode}.json"
    path.write_text(config.model_dump_json())
    steps = []
    started = time.monotonic()
    run_stage_job(LocalLaunch(nproc=1, threads_per_proc=args.threads),
        "stages.agentic.train", path, lambda line: steps.append(e) if (e := parse_event(line)) and e["event"] == "step" else None)
    trained = sum(args.group_size * args.groups_per_step for _ in steps)
    return {"mode": mode, "trained_samples": trained, "samples_per_s": steps[-1]["samples_per_s"],
            "wall_s": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=16, help="groups generating at once in async mode")
    parser.add_argument("--latency-median-s", type=float, default=0.2)
    parser.add_argument("--latency-sigma", type=float, default=1.5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="async-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["POSTTRAIN_WORKDIR"] = str(workdir / "runs")
        prepared = prepare(open_store(str(workdir / "store")), suites=["calc", "search"], sizes=SuiteSizes(200, 20),
                           preset="glm5-tiny", seed=0, triggered_by="bench")
        store = {"root": str(workdir / "store"), "init": prepared.init_checkpoint.uri,
                 "datasets": sorted(d.uri for d in prepared.datasets.values())}
        sync = run_mode("sync", store, args, workdir)
        asynchronous = run_mode("async", store, args, workdir)
    print(json.dumps({"sync": sync, "async": asynchronous,
                      "ratio": round(asynchronous["samples_per_s"] / sync["samples_per_s"], 2)}, indent=2))


if __name__ == "__main__":
    main()
