"""Speculative decoding with the MTP layer's drafts: acceptance length at 1-4 draft steps and decode tokens/s against
plain decoding, on the demo's held-out prompts, paired in one process.

Every arm is our engine (`Engine`, in this process, no HTTP) loaded from the same checkpoint (default: the demo's
reasoning RL output, whose MTP layer SFT and RL trained), decoding the same held-out prompts of a suite's test
split (default: arith's, the reasoning RL prompts, rendered as the stage renders them) with the same sampling and
stopping rule (the stop tokens; `--new-tokens` at most): `--arms 0` is plain decoding, `K` drafts K tokens per
verification step, `K@R` does once at most R rows of the batch decode (`engines.speculative_max_rows`: plain
decoding before, the batch's tail speculated). `--samples N` repeats each prompt N times, as an RL stage samples a
group per prompt. Arms alternate in rotating order (bench/rounds.py) for at least 3 rounds;
each figure is the median over rounds with its range, the speed ratios per round against plain decoding.

Per arm: decode tokens/s (every completion token over the wall time of the batch, prefill included), acceptance
length (tokens per verification step: 1 + the drafts that stood), the share of tokens decoded speculatively, the
share of drafts that stood, the mean completion length and the stage's reward (arith's exact-match accuracy): a
dead arm shows (greedy completions are the same tokens in every arm; sampled ones differ by the draws, not in
distribution).

    .venv/bin/python bench/speculative.py --store S [--checkpoint reasoning_rl:latest --suite arith --prompts 64
                                                     --samples 1 --new-tokens 96 --temperature 1.0 --rounds 3
                                                     --arms 0 1 2 3 4 3@8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

# Run as a script, its folder is on sys.path, not the repository's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from infra.references import resolve_checkpoint  # noqa: E402
from infra.store import open_artifact, open_store  # noqa: E402
from model.tokenizer import load_tokenizer  # noqa: E402
from rewards.protocol import RewardSample  # noqa: E402
from rewards.verifiers import ArithExactMatch  # noqa: E402
from rollout.engine.generation import Engine  # noqa: E402
from rollout.protocol import SamplingParams, UniformBatch  # noqa: E402
from stages.common.inputs import download_once, load_split  # noqa: E402
from stages.common.prompts import RlPrompt, parse_prompts, prompt_contract  # noqa: E402


def heldout_prompts(store, suite: str, count: int, tokenizer, workdir: Path) -> list[RlPrompt]:
    """The first `count` prompts of the newest committed `suite` dataset's test split, as the RL stages render them."""
    names = sorted(name for name in store.list_committed("datasets/") if name.rpartition("/")[2].rpartition("-")[0] == suite)
    if not names:
        raise SystemExit(f"no {suite} dataset in {store.root_uri}: run `make demo` first")
    artifact = store.open(names[-1])
    contract = prompt_contract(artifact)
    prompts = parse_prompts(load_split([artifact], "test", workdir, contract), contract, tokenizer)
    return prompts[:count]


def run_arm(engine: Engine, prompts: list[RlPrompt], params: SamplingParams, tokenizer) -> dict:
    started = time.perf_counter()
    completions, _ = engine.generate(UniformBatch([prompt.prompt_ids for prompt in prompts], params))
    seconds = time.perf_counter() - started
    tokens = sum(len(c.output_ids) for c in completions)
    # The stage's own reward: an arm whose output is not the model's would show here before in the speed.
    samples = [RewardSample(prompt.messages, tokenizer.decode(c.output_ids, skip_special_tokens=False),
                            prompt.reference) for prompt, c in zip(prompts, completions, strict=True)]
    rewards = ArithExactMatch()(samples)
    figures = {"tokens_per_s": tokens / seconds, "seconds": seconds, "completion_length": tokens / len(completions),
               "accuracy": sum(r or 0.0 for r in rewards) / len(rewards)}
    steps = sum(c.spec_verify_ct or 0 for c in completions)
    stood = sum(c.spec_num_correct_drafts or 0 for c in completions)
    figures["speculated_share"] = (steps + stood) / tokens  # of the tokens, those verification steps gave
    if steps:
        figures["accept_length"] = (steps + stood) / steps
        figures["drafts_stood"] = stood / sum(c.spec_num_proposed_drafts for c in completions)
    return figures


def parsed_arm(parser: argparse.ArgumentParser, arm: str) -> tuple[int, int | None]:
    """`K` or `K@R` → (draft steps, speculative_max_rows)."""
    steps, _, rows = arm.partition("@")
    if not steps.isdigit() or (rows and not (rows.isdigit() and int(rows) > 0)) or (rows and int(steps) == 0):
        parser.error(f"--arms {arm}: give K (drafts per step, 0: plain decoding) or K@R (K > 0 drafts once at most "
                     f"R rows decode)")
    return int(steps), int(rows) if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="the demo's store (make demo)")
    parser.add_argument("--checkpoint", default="reasoning_rl:latest")
    parser.add_argument("--suite", default="arith", help="whose held-out prompts (a suite's dataset in the store); "
                                                               "accuracy is arith's exact match")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=1.0, help="RL's sampling; 0 decodes greedily")
    parser.add_argument("--samples", type=int, default=1, help="completions per prompt, in one batch (an RL group)")
    parser.add_argument("--arms", nargs="+", default=["0", "1", "2", "3", "4", "3@8"],
                        help="K: K drafts per verification step (0: plain decoding); K@R: once at most R rows decode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3, so the median and range mean something")
    arms = {arm: parsed_arm(parser, arm) for arm in args.arms}
    if "0" not in arms:
        parser.error("--arms: include 0, plain decoding, the baseline every ratio is taken against")
    torch.set_num_threads(args.threads)
    before = machine()
    store = open_store(args.store)
    checkpoint = resolve_checkpoint(store, args.checkpoint, "--checkpoint")
    with tempfile.TemporaryDirectory(prefix="speculative-bench-") as tmp:
        local = download_once(open_artifact(checkpoint), Path(tmp) / "checkpoint")
        tokenizer = load_tokenizer(local)
        prompts = [prompt for prompt in heldout_prompts(store, args.suite, args.prompts, tokenizer, Path(tmp))
                   for _sample in range(args.samples)]
        engines = {f"draft_{arm}": Engine(local, seed=args.seed, speculative_steps=steps, speculative_max_rows=rows)
                   for arm, (steps, rows) in arms.items()}
        params = SamplingParams(temperature=args.temperature, max_new_tokens=args.new_tokens)
        for engine in engines.values():  # warm-up, untimed
            engine.generate(UniformBatch([p.prompt_ids for p in prompts[:4]],
                                         params.model_copy(update={"max_new_tokens": 8})))
        runs = alternate({name: (lambda _round, e=engine: run_arm(e, prompts, params, tokenizer))
                          for name, engine in engines.items()}, args.rounds)
    plain = [run["tokens_per_s"] for run in runs["draft_0"]]
    arms = {}
    for name, rounds in runs.items():
        # A round whose batch never came down to the arm's rows speculated nothing: no acceptance to count there.
        keys = dict.fromkeys(key for run in rounds for key in run)
        arms[name] = {key: spread([run[key] for run in rounds if key in run]) for key in keys}
        if name != "draft_0":
            arms[name]["speedup_over_plain"] = ratio_spread([run["tokens_per_s"] for run in rounds], plain)
    print(json.dumps({"bench": "speculative", "checkpoint": checkpoint, "suite": args.suite, "prompts": args.prompts,
                      "samples": args.samples,
                      "new_tokens": args.new_tokens, "temperature": args.temperature, "rounds": args.rounds,
                      "threads": args.threads, "machine": before, "arms": arms}, indent=2))


if __name__ == "__main__":
    main()
