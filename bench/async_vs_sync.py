"""Agentic RL fully asynchronous against synchronous: seconds from launch to the N-th step and to the job's end.

Both modes (the stage's `mode`: "async" or "sync") train the same tiny model on the same tasks (search and calc)
against task services whose every step waits a seeded lognormal delay (median `--latency-median-s`, shape
`--latency-sigma`: with sigma 1.5 about one step in twenty waits more than 12× the median). Synchronous mode starts
a batch's groups and waits for them before training, and starts the next batch only after the step's weight push;
asynchronous mode keeps generating while the trainer trains and pushes.

Like for like:

- the clocks: one clock per run, started before the job is launched (before its process, engine replicas or task
  services start), read when the N-th step's event line arrives and when the job's process has exited (teardown:
  final checkpoint commit, engines and services stopped). No samples/s from inside the stage, whose clock starts
  once generation has begun.
- groups in flight: sync keeps `groups_per_step` groups generating (one replaced for each one not trained on,
  during a step's draws) and none while it trains; its closest async equivalent is `max_in_flight_groups` =
  `groups_per_step`, the same groups generating at once, just also while the trainer trains.
- the staleness bound τ (`staleness_tau`, the stage's default unless `--staleness-tau`) is the same. Sync samples
  are never stale (every rollout starts after the push before it); async drops the samples more than τ weight
  versions old, and reports how many.
- the same work per step: dynamic sampling is off unless `--dynamic-sampling`, so every step of either mode trains
  and pushes `groups_per_step` groups as drawn (with it on, an untrained model's groups mostly have equal rewards,
  a step draws until its cap and may train nothing, and how many groups it waited for is luck, not the mode).
- the same steps, group size, groups per step, prompts (the same seed draws them), engines, sampling, episode
  limits, checkpointing (only at the end) and threads.

Rounds alternate (bench/rounds.py, at least 3), each round running both modes once; each mode's launch→N-th-step
and launch→end seconds, and the per-round ratios sync/async (above 1: async faster), are reported as median with
min and max, never best-of, with the load average and versions, as one JSON document. Each run also shows its
steps done, groups trained, mean reward, mean grad norm, the model's tokens per trained episode and stale
samples dropped, so a dead arm shows.

The model: by default the untrained init of a store of the bench's own (suites calc and search), whose every
reward is 0, so the arms train nothing and only the clocks compare. `--store ROOT --checkpoint REF` starts both
modes from a committed checkpoint of an existing store instead (e.g. a demo's `reasoning_rl:latest`), on that
store's newest calc and search datasets, with the runs' checkpoints committed under `bench/async-vs-sync/` there
(never `checkpoints/agentic_rl/`, so `agentic_rl:latest` still names what the pipeline made); give that model the
demo's episode limits (`--max-new-tokens 64 --max-turns 6`) so that its episodes can succeed.

    .venv/bin/python bench/async_vs_sync.py [--rounds 3 --steps 8 --at-step 4 --latency-median-s 0.2 --latency-sigma 1.5]
    .venv/bin/python bench/async_vs_sync.py --store artifacts --checkpoint reasoning_rl:latest \\
        --max-new-tokens 64 --max-turns 6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from data_prep.prepare import prepare  # noqa: E402
from infra.launch import run_stage_job  # noqa: E402
from infra.launchers.local import LocalLaunch  # noqa: E402
from infra.references import resolve_checkpoint, resolve_dataset  # noqa: E402
from infra.store import open_store  # noqa: E402
from stages.agentic.config import AgenticRlConfig  # noqa: E402
from stages.common.events import parse_event  # noqa: E402
from suites.prepare import SuiteSizes  # noqa: E402

MODES = ("sync", "async")


def config_for(mode: str, index: int, store: dict, args) -> AgenticRlConfig:
    """Everything but `mode` alike in both arms; a run id of its own per round, since a run whose output is already
    in the store would end without training."""
    run_id = f"{store['bench_id']}-{mode}-r{index}"
    return AgenticRlConfig(
        run_id=run_id, output_name=f"bench/async-vs-sync/{run_id}", store=store["root"], init_checkpoint=store["init"],
        datasets=store["datasets"], seed=args.seed, mode=mode, max_steps=args.steps, group_size=args.group_size,
        groups_per_step=args.groups_per_step, max_in_flight_groups=args.groups_per_step,
        staleness_tau=args.staleness_tau, dynamic_sampling={"enabled": args.dynamic_sampling},
        engines={"replicas": 2}, sampling={"max_new_tokens": args.max_new_tokens},
        episode={"max_turns": args.max_turns},  # the stage's context limits: a search prompt alone is ~350 tokens
        env_latency_median_s=args.latency_median_s, env_latency_sigma=args.latency_sigma,
        checkpoint_every=args.steps,  # no resume checkpoint inside the run: only the final commit, in teardown
    )


def starting_point(args, workdir: Path) -> dict:
    """Where the runs commit, the checkpoint they start from and their datasets: `--checkpoint` of `--store` on that
    store's newest calc and search, or a store of the bench's own in `workdir` with an untrained init."""
    bench_id = f"bench-{time.strftime('%Y%m%dT%H%M%S')}"
    if args.checkpoint:
        store = open_store(args.store)
        try:
            return {"root": args.store, "bench_id": bench_id,
                    "init": resolve_checkpoint(store, args.checkpoint, "--checkpoint"),
                    "datasets": [resolve_dataset(store, f"{suite}:latest", "--store") for suite in ("calc", "search")]}
        except ValueError as error:  # a reference that names nothing committed
            raise SystemExit(f"bench/async_vs_sync.py: {error}") from None
    prepared = prepare(open_store(str(workdir / "store")), suites=["calc", "search"], sizes=SuiteSizes(200, 20),
                       preset="glm5-tiny", seed=0, triggered_by="bench")
    return {"root": str(workdir / "store"), "bench_id": bench_id, "init": prepared.init_checkpoint.uri,
            "datasets": sorted(d.uri for d in prepared.datasets.values())}


def run_mode(mode: str, index: int, store: dict, args, workdir: Path) -> dict:
    """One job from launch to exit: its clock readings and what it trained, from its step events."""
    path = workdir / f"{mode}-r{index}.json"
    path.write_text(config_for(mode, index, store, args).model_dump_json())
    steps: list[dict] = []
    at_step_s = None

    def on_line(line: str) -> None:
        nonlocal at_step_s
        event = parse_event(line)
        if event and event["event"] == "step":
            steps.append(event)
            if len(steps) == args.at_step:  # read as the line arrives: the step's time as the launcher sees it
                at_step_s = time.monotonic() - launched

    launched = time.monotonic()
    run_stage_job(LocalLaunch(nproc=1, threads_per_proc=args.threads), "stages.agentic.train", path, on_line)
    end_s = time.monotonic() - launched
    updated = [s for s in steps if "reward_mean" in s]  # a step without a group with signal trains nothing
    trained = sum(s["groups_trained"] for s in updated)
    return {
        "launch_to_step_s": at_step_s, "launch_to_end_s": end_s, "steps_done": len(steps),
        "groups_trained": trained, "samples_trained": trained * args.group_size,
        "reward_mean": sum(s["reward_mean"] * s["groups_trained"] for s in updated) / trained if trained else None,
        "grad_norm_mean": sum(s["grad_norm"] for s in updated) / len(updated) if updated else None,
        # The model's tokens per trained episode, every turn: an arm whose episodes end at once shows here.
        "completion_tokens_mean": sum(s["trained_tokens"] for s in updated) / (trained * args.group_size)
        if trained else None,
        "stale_dropped": sum(s["stale_dropped"] for s in steps),
        "groups_drawn": sum(s["groups_drawn"] for s in steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    parser.add_argument("--at-step", type=int, default=4, help="N: launch to this step's event is timed too")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=4,
                        help="also the groups in flight in both modes (async: max_in_flight_groups)")
    parser.add_argument("--staleness-tau", type=int, default=AgenticRlConfig.model_fields["staleness_tau"].default)
    parser.add_argument("--dynamic-sampling", action="store_true",
                        help="the stage's default: train only groups whose rewards differ (steps then vary in work)")
    parser.add_argument("--latency-median-s", type=float, default=0.2)
    parser.add_argument("--latency-sigma", type=float, default=1.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=16, help="per turn (the demo's agentic RL: 64)")
    parser.add_argument("--max-turns", type=int, default=3, help="per episode (the demo's agentic RL: 6)")
    parser.add_argument("--store", help="an existing store to start from (with --checkpoint)")
    parser.add_argument("--checkpoint", help="a committed checkpoint of --store both modes start from, e.g. "
                                             "reasoning_rl:latest (default: an untrained init of the bench's own)")
    parser.add_argument("--out", type=Path, help="also write the JSON document here")
    args = parser.parse_args()
    if (args.store is None) != (args.checkpoint is None):
        parser.error("--store and --checkpoint go together")
    if args.rounds < 3:
        parser.error("--rounds: at least 3, so that the median and the range say something")
    if not 1 <= args.at_step <= args.steps:
        parser.error("--at-step: between 1 and --steps")

    with tempfile.TemporaryDirectory(prefix="async-bench-") as tmp, \
            patch.dict(os.environ, {"POSTTRAIN_WORKDIR": str(Path(tmp) / "runs")}):  # restored on the way out
        workdir = Path(tmp)
        store = starting_point(args, workdir)
        loads = machine()
        runs = alternate({mode: lambda index, mode=mode: run_mode(mode, index, store, args, workdir) for mode in MODES},
                         args.rounds)

    figures = ("launch_to_step_s", "launch_to_end_s")
    result = {
        "rounds": args.rounds, "steps": args.steps, "at_step": args.at_step, "group_size": args.group_size,
        "groups_per_step": args.groups_per_step,
        "groups_in_flight": {"sync": f"{args.groups_per_step} (groups_per_step, none while training)",
                             "async": f"{args.groups_per_step} (max_in_flight_groups)"},
        "staleness_tau": args.staleness_tau, "dynamic_sampling": args.dynamic_sampling,
        "latency_median_s": args.latency_median_s,
        "latency_sigma": args.latency_sigma, "seed": args.seed, "threads": args.threads,
        "checkpoint": store["init"], "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns,
        "arms": {mode: {**{figure: spread([run[figure] for run in runs[mode]]) for figure in figures},
                        "runs": runs[mode]} for mode in MODES},
        # Seconds sync / seconds async, rounds paired as they alternated: above 1, async is faster.
        "ratios_sync_over_async": {figure: ratio_spread([run[figure] for run in runs["sync"]],
                                                        [run[figure] for run in runs["async"]]) for figure in figures},
        "machine": loads,
    }
    document = json.dumps(result, indent=2)
    print(document)
    if args.out:
        args.out.write_text(document + "\n")


if __name__ == "__main__":
    main()
