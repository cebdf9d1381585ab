"""Does an RL stage learn? One stage, one input checkpoint, N seeds: the held-out gain with its 95% confidence interval.

Runs reasoning RL, agentic RL or general RL from one committed checkpoint (default: the one the pipeline
starts the stage from, the newest of the step before it) with seeds 0..N-1 and the demo's config otherwise,
and measures the metric the demo's report shows for the stage (reasoning RL: arith/accuracy_sampled, agentic
RL: tool_success, general RL: rule_compliance) before and after. `--compare KEY=VALUE` runs a second arm on
the same seeds and gives the paired difference of the gains; the arms alternate per seed (A s0, B s0, A s1,
...) so drift of the machine hits both alike.

The config is the pipeline's (flows/stage_inputs.py on the spec's section, its datasets, the checkpoint and,
for general RL, the newest ORM: posttrain/learning_runs.py); only the stage's `seed` differs per run. Each run does
what the stage's flow does: evaluate the input checkpoint, train, evaluate the result. The evaluation is the
flow's, with the spec's `eval` section and the spec's seed, as the pipeline passes it (flows/stage_inputs.py
stage_evals): in the pipeline that seed is the run's, the stage's too, but it is a setting of its own, which
the bench keeps at the spec's, so every "after" is measured on the same prompts and sampling seeds as the
"before". Evaluations are committed per checkpoint and settings, so the "before" is measured once (by the
demo already, or by the first run) and read back by every other run: each seed's gain is after - before.

Each run's artifacts go under `--namespace` in the store (default bench/), never under checkpoints/, so the
pipeline's `STAGE:latest` is unchanged; jobs' scratch is a temporary folder removed at the end. The t
quantile comes from scipy (posttrain/learning_stats.py says why).

It lives with the command line because it drives the pipeline's own pieces (flows/), which nothing but the
command line and the tests imports; bench/learning.py is the script that runs it.

    .venv/bin/python bench/learning.py --store artifacts --stage agentic_rl --seeds 3 \\
        --compare dynamic_sampling.enabled=false
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import shlex
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from data_contracts.lineage import current_code_version
from flows.params import PipelineParams
from infra.store import open_store
from posttrain.learning_runs import run_config, sanity, scratch_workdir, stage_setup, train_and_evaluate
from posttrain.learning_stats import MeanInterval, mean_interval, paired_differences

RL_STAGES = ("reasoning_rl", "agentic_rl", "general_rl")
# Each run's sanity figures (posttrain/learning_runs.py sanity) and their columns; the groups are totals over the steps.
SANITY_COLUMNS = {"steps": "steps", "steps_without_update": "no update", "reward_mean": "reward",
                  "grad_norm": "grad norm", "completion_tokens": "tokens", "groups_drawn": "drawn",
                  "groups_with_signal": "signal", "groups_trained": "trained"}


def key_value(text: str) -> tuple[str, Any]:
    """`dynamic_sampling.enabled=false` → ("dynamic_sampling.enabled", False): the value read as YAML, as in a spec."""
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE (a dotted key into the stage's config)")
    return key.strip(), yaml.safe_load(value)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="the artifact store with a finished demo run (default: the spec's, else "
                                        "$POSTTRAIN_STORE or ./artifacts)")
    parser.add_argument("--stage", required=True, choices=RL_STAGES)
    parser.add_argument("--spec", help="the pipeline spec whose section of the stage is the config (default: the "
                                       "demo's, specs/tiny.yaml)")
    parser.add_argument("--checkpoint", help="the committed checkpoint to start from (default: the newest of the "
                                             "step before the stage, e.g. sft:latest for reasoning_rl)")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1 (default 3)")
    seeds.add_argument("--seed-list", type=lambda text: [int(s) for s in text.split(",")], help="e.g. 0,1,2")
    parser.add_argument("--set", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="an override of the stage's config for both arms (repeatable), e.g. max_steps=10")
    parser.add_argument("--compare", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="run arm B with this override as well (repeatable) and give the paired difference")
    parser.add_argument("--namespace", default="bench", type=lambda text: text.strip("/"),
                        help="the folder of the store the runs' artifacts go under (default bench)")
    parser.add_argument("--out", type=Path, help="the JSON result (default: runs/bench/<bench id>.json)")
    args = parser.parse_args(argv)
    args.seed_list = args.seed_list or list(range(args.seeds))
    if not args.seed_list or len(set(args.seed_list)) != len(args.seed_list):
        parser.error(f"seeds {args.seed_list}: give at least one, each once")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    command = shlex.join(["bench/learning.py", *(sys.argv[1:] if argv is None else argv)])
    bench_id = f"learning-{args.stage}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"
    out = args.out or Path("runs") / "bench" / f"{bench_id}.json"
    spec_name, spec, base = PipelineParams(spec=args.spec, store=args.store).load_spec()
    arms = {"A": dict(args.set)} | ({"B": dict(args.set) | dict(args.compare)} if args.compare else {})

    try:
        setup = stage_setup(spec, base, args.stage, args.checkpoint)
        # Every run's config is checked before anything trains: a mistyped key fails at once.
        configs = {arm: {seed: run_config(setup, overrides, seed, f"{bench_id}-{arm}-s{seed}", args.namespace)
                         for seed in args.seed_list} for arm, overrides in arms.items()}
    except ValueError as error:  # a reference that names nothing committed, an override that names no field
        raise SystemExit(f"bench/learning.py: {error}") from None
    print(f"{args.stage} from {setup.checkpoint}, seeds {args.seed_list}, arms {', '.join(arms)}", flush=True)

    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    with scratch_workdir():
        for seed in args.seed_list:
            for arm in arms:  # alternating: drift of the machine over the bench hits both arms alike
                runs[arm].append(one_run(setup, configs[arm][seed], arm))

    result = {"command": command, "code": current_code_version().model_dump(), "bench_id": bench_id,
              "stage": args.stage, "spec": spec_name, "store": open_store(spec.store).root_uri,
              "checkpoint": setup.checkpoint, "metric": runs["A"][0]["metric"], "before": runs["A"][0]["before"],
              "eval_settings": asdict(setup.eval_settings), "seeds": args.seed_list,
              # Each arm's config as its first seed ran it: the seeds differ only in `seed`, `run_id`, `output_name`.
              "arms": {arm: {"overrides": overrides, "config": configs[arm][args.seed_list[0]].model_dump(mode="json"),
                             "runs": runs[arm], "mean_gain_points": interval_record(gain_interval(runs[arm]))}
                       for arm, overrides in arms.items()}}
    if "B" in arms:
        differences = paired_differences(*({r["seed"]: r["gain_points"] for r in runs[arm]} for arm in ("A", "B")))
        result["paired"] = {"differences_points": differences,
                            "mean_points": interval_record(mean_interval(list(differences.values())))}
    print_tables(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(finite_or_null(result), indent=2) + "\n")
    print(f"results: {out}")
    return result


def gain_interval(runs: list[dict]) -> MeanInterval:
    return mean_interval([run["gain_points"] for run in runs])


def print_tables(result: dict) -> None:
    # Into a file or a pipe rich would fold the tables into 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=140)
    for arm, recorded in result["arms"].items():
        console.print(arm_table(arm, recorded["overrides"], result["metric"], recorded["runs"]))
        console.print(f"arm {arm}: mean gain {interval_line(gain_interval(recorded['runs']))}\n")
    if "paired" in result:
        differences = result["paired"]["differences_points"]
        console.print(paired_table(differences))
        console.print(f"B - A: mean difference {interval_line(mean_interval(list(differences.values())))}")


def one_run(setup, config, arm: str) -> dict:
    started = time.monotonic()
    label = f"{arm} s{config.seed}"

    def show(step: dict) -> None:
        if step["step"] == 1 or step["step"] % 5 == 0 or step["step"] == step["total"]:
            reward = f" reward {step['reward_mean']:.3f}" if "reward_mean" in step else ""
            print(f"{label}: step {step['step']}/{step['total']}{reward}" + ("" if "loss" in step else " (no update)"),
                  flush=True)

    trained = train_and_evaluate(setup, config, show)
    print(f"{label}: {trained.metric} before {trained.before:.4f}, after {trained.after:.4f} "
          f"({time.monotonic() - started:.0f} s)", flush=True)
    return {"seed": config.seed, "run_id": config.run_id, "checkpoint": trained.checkpoint, "metric": trained.metric,
            "before": trained.before, "after": trained.after, "gain_points": 100 * (trained.after - trained.before),
            "sanity": sanity(trained.history, config.group_size), "train_s": trained.train_s,
            "wall_s": round(time.monotonic() - started, 1)}


def arm_table(arm: str, overrides: dict, metric: str, runs: list[dict]) -> Table:
    shown = ", ".join(f"{key}={value}" for key, value in overrides.items()) or "the spec's config"
    table = Table(title=f"arm {arm} ({shown}): {metric}")
    for column in ("seed", "before", "after", "gain (points)", *SANITY_COLUMNS.values(), "train s"):
        table.add_column(column, justify="right")
    for run in runs:
        figures = [cell(run["sanity"][key]) for key in SANITY_COLUMNS]
        table.add_row(str(run["seed"]), f"{run['before']:.4f}", f"{run['after']:.4f}", f"{run['gain_points']:+.1f}",
                      *figures, f"{run['train_s']:.0f}")
    return table


def paired_table(differences: dict[int, float]) -> Table:
    table = Table(title="paired difference: gain of B - gain of A, same seed")
    table.add_column("seed", justify="right")
    table.add_column("B - A (points)", justify="right")
    for seed, difference in differences.items():
        table.add_row(str(seed), f"{difference:+.1f}")
    return table


def cell(value) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.3g}"


def interval_line(interval: MeanInterval) -> str:
    if interval.lo is None:
        return f"{interval.mean:+.1f} points (one seed: no interval)"
    return (f"{interval.mean:+.1f} points, {interval.level:.0%} CI [{interval.lo:+.1f}, {interval.hi:+.1f}] "
            f"(t, {interval.df} df)")


def interval_record(interval: MeanInterval) -> dict:
    return {**asdict(interval), "df": interval.df}


def finite_or_null(value):
    """JSON has no NaN: a non-finite figure (a step whose loss was not finite) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_null(item) for item in value]
    return value
