"""One GRPO step split into generate / reward / train / push, ours against TRL's GRPOTrainer like for like.

Ours is the reasoning RL stage job as the pipeline runs it (its engine over HTTP, its reward modules,
DeepSpeed, the configured weight push), on the demo's SFT checkpoint and arith prompts: 4 prompts × 8
responses of up to 64 new tokens per step, rewarded as the demo rewards them (exact match + 0.5 × step
prefix); its step records carry generate_s, reward_s, train_s and push_s. TRL 1.16 (`uv pip install -e
'.[bench]'`) runs GRPOTrainer on the same checkpoint in two arms: trl-sparse with the model's DSA sparse
attention, as ours serves and trains it, and trl-dense with the indexer off (plain SDPA, what TRL runs on a
model without DSA; the same computation wherever a sequence is within the indexer's top-k keys).

What makes it like for like, each a way an earlier version of this bench went wrong:
- The same prompts per step, in the same order. Our stage draws a step's prompts from a seeded rng; the
  bench makes the same draw and hands TRL exactly those prompts in that order (shuffle_dataset=False, and one
  generation batch of prompts × group per optimizer step), then checks what each side recorded against it.
  Our dynamic sampling is off: it would draw more prompts for a step whose groups all scored alike.
- The same rewards. TRL's `completions` are decoded with skip_special_tokens=True, and our turn scoring needs
  the stop token (model/turns.py), so a reward read from them is 0 for every completion and TRL never trains.
  TRL's reward function scores its `completion_ids` with the stage's own scoring code instead
  (stages/grpo/rewards.py: decoded with special tokens kept, the same modules and weights).
- The same objective and optimizer. TRL's loss_type="grpo" averages over a sequence's tokens and then over
  sequences, as ours does; PPO clip 0.2 / 0.28, no KL term, advantages normalised by the group's std, AdamW
  (0.9, 0.95) at a constant lr, grad clip 1, the indexer frozen, one update per generation batch. Ours also
  weighs each token by IcePop's band on π_train/π_infer; TRL generating with its own model has no π_infer
  apart from π_train to correct for. TRL computes token entropies for its logs, which it has no switch for.
- TRL at its best on this machine: use_vllm=False (there is no vLLM here; transformers' generate in-process,
  whose finished rows go on decoding until the batch's longest stops, where our engine drops them), on the
  device and in the precision our stage picks (a GPU in bf16, else the CPU in fp32), with the same threads.

Every step of every run prints the mean completion length, the mean reward, its std, the groups whose
rewards differ, the loss and the grad norm, so a run that does not learn shows; a run whose rewards or grad
norms are all zero is refused: no ratio, a warning, exit status 1. The arms alternate for `--rounds` (at
least 3; bench/rounds.py), each for `--steps` steps; the first step of every run is warm-up and not counted.
Completions per second are counted between the end of the first step and the end of the last, from the step
records' arrival (ours) or TRL's step-end callback. The figure is each arm's median over rounds with its
range, and the median and range of the per-round ratios ours / trl-sparse and ours / trl-dense.

    .venv/bin/python bench/grpo_step.py --store artifacts [--checkpoint sft:latest --steps 5 --rounds 3 --out FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import torch

# Run as a script (`python bench/grpo_step.py`), its folder is on sys.path, not the repository's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from infra.launch import run_stage_job  # noqa: E402
from infra.launchers.local import LocalLaunch  # noqa: E402
from infra.references import resolve_checkpoint  # noqa: E402
from infra.rollouts import recorded_shards  # noqa: E402
from infra.store import open_artifact, open_store  # noqa: E402
from model.tokenizer import load_tokenizer  # noqa: E402
from stages.common.events import parse_event  # noqa: E402
from stages.common.inputs import load_split  # noqa: E402
from stages.common.prompts import RlPrompt, parse_prompts, prompt_contract  # noqa: E402
from stages.grpo.config import ReasoningRlConfig  # noqa: E402

REWARDS = [{"path": "rewards.verifiers.ArithExactMatch"}, {"path": "rewards.verifiers.ArithStepPrefix", "weight": 0.5}]
PARTS = ("generate_s", "reward_s", "train_s", "push_s")
ARMS = ("ours", "trl-sparse", "trl-dense")


def recipe(steps: int, **io) -> ReasoningRlConfig:
    """The settings both sides run: ours as its run.json, TRL's GRPOConfig read from them (trl_args)."""
    return ReasoningRlConfig(
        prompts_per_step=4, group_size=8, oversample=1, dynamic_sampling={"enabled": False}, max_steps=steps,
        rewards=REWARDS, sampling={"max_new_tokens": 64}, optimizer={"lr": 1e-4, "warmup_steps": 0},
        checkpoint_every=10_000, **io)


def trl_args(config: ReasoningRlConfig, cuda: bool) -> dict:
    """GRPOConfig's arguments for `config`: one generation batch of prompts × group per optimizer step."""
    batch = config.prompts_per_step * config.group_size
    return dict(
        per_device_train_batch_size=batch, generation_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=config.group_size, shuffle_dataset=False, max_completion_length=config.sampling.max_new_tokens,
        temperature=config.sampling.temperature, top_p=config.sampling.top_p, use_vllm=False, max_steps=config.max_steps,
        learning_rate=config.optimizer.lr, lr_scheduler_type="constant", warmup_steps=0, adam_beta2=0.95,
        weight_decay=config.optimizer.weight_decay, max_grad_norm=config.optimizer.grad_clip, beta=0.0,
        loss_type="grpo", scale_rewards="group", epsilon=config.objective.eps_low,
        epsilon_high=config.objective.eps_high, disable_dropout=True, use_cpu=not cuda, bf16=cuda, seed=config.seed,
        logging_steps=1, report_to="none", save_strategy="no", log_completions=False)


def arith_prompts(store, checkpoint: str) -> str:
    """The arith prompt dataset the demo's reasoning RL trained on (from its lineage), else any in the store."""
    try:
        rl = open_artifact(resolve_checkpoint(store, "reasoning_rl:latest", "--store")).lineage()
        return next(d["uri"] for d in rl["inputs"] if "arith" in d["uri"])
    except Exception:  # no reasoning RL run yet: the newest committed arith dataset
        names = sorted(n for n in store.list_committed("datasets/") if "arith" in n)
        if not names:
            raise SystemExit(f"no arith dataset in {store.root_uri}: run `make demo` first") from None
        return store.open(names[-1]).uri


def planned_prompts(config: ReasoningRlConfig, dataset: str, tokenizer, workdir: Path) -> list[list[RlPrompt]]:
    """Each step's prompts as our stage draws them: its prompts read as stages/grpo/reasoning.py reads them, drawn
    by the rng stages/grpo/loop.py seeds per step (with dynamic sampling off, one draw per step). Both sides'
    records are checked against this, so a change to the stage's draw stops the bench instead of skewing it."""
    artifact = open_artifact(dataset)
    contract = prompt_contract(artifact)
    prompts = parse_prompts(load_split([artifact], "train", workdir, contract), contract, tokenizer)
    return [random.Random(f"reasoning-rl:{config.seed}:{step}").sample(prompts, config.prompts_per_step)
            for step in range(config.max_steps)]


def checked_prompts(arm: str, trained: list[list[str]], plan: list[list[RlPrompt]]) -> None:
    """Each step trained on the planned prompts. As sets: both sample them in the planned order, but our stage
    puts the groups whose rewards differ first in its batch (informative_groups), which changes no sum."""
    expected = [sorted(prompt.id for prompt in step) for step in plan]
    if [sorted(step) for step in trained] != expected:
        raise SystemExit(f"{arm} trained on other prompts than the planned draw: {trained} != {expected}")


def step_figures(step: int, lengths: Sequence[int], rewards: Sequence[float], group: int, loss: float,
                 grad_norm: float) -> dict:
    """What shows whether a step learned anything: a group whose rewards are all equal has advantage 0."""
    groups = [rewards[i:i + group] for i in range(0, len(rewards), group)]
    return {"step": step, "completion_length": statistics.mean(lengths), "reward_mean": statistics.mean(rewards),
            "reward_std": statistics.pstdev(rewards), "groups_with_spread": sum(max(g) > min(g) for g in groups),
            "groups": len(groups), "loss": loss, "grad_norm": grad_norm}


def completions_per_s(config: ReasoningRlConfig, ends: list[float]) -> float:
    """Completions per second after the warm-up step: from the end of the first step to the end of the last."""
    return config.prompts_per_step * config.group_size * (len(ends) - 1) / (ends[-1] - ends[0])


def scratch_copy(store, uris: list[str], root: Path) -> list[str]:
    """The artifacts at `uris` in `store` (a folder on this machine) copied into a store at `root`: a stage
    reads its inputs from the store it writes to, and the bench writes nothing into the demo's."""
    source = Path(urlsplit(store.root_uri).path)
    names = [uri.removeprefix(store.root_uri).strip("/") for uri in uris]
    for name in names:
        shutil.copytree(source / name, root / name)
    return [open_store(str(root)).open(name).uri for name in names]


def run_ours(store, checkpoint: str, dataset: str, plan: list[list[RlPrompt]], steps: int, threads: int,
             sync: str, tag: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="grpo-step-") as tmp:
        root = Path(tmp) / "store"
        checkpoint, dataset = scratch_copy(store, [checkpoint, dataset], root)
        config = recipe(steps, run_id=f"bench-{tag}", store=str(root), init_checkpoint=checkpoint, datasets=[dataset],
                        engines={"weight_sync": sync})
        path = Path(tmp) / "run.json"
        path.write_text(config.model_dump_json())
        records: list[tuple[float, dict]] = []

        def on_line(line: str) -> None:
            event = parse_event(line)
            if event and event.get("event") == "step":
                records.append((time.monotonic(), event))

        run_stage_job(LocalLaunch(nproc=1, threads_per_proc=threads), "stages.grpo.reasoning", path, on_line)
        # The trained samples on record (every group, with dynamic sampling off): their prompts, lengths, rewards.
        rows = [shard.table().to_pylist() for shard in recorded_shards(open_store(str(root)).open(config.output_name))]
    if [e["groups_drawn"] for _, e in records] != [config.prompts_per_step] * steps:
        raise SystemExit(f"ours drew other than {config.prompts_per_step} prompts a step: {records}")
    checked_prompts("ours", [[r["prompt_id"] for r in step[::config.group_size]] for step in rows], plan)
    counted = [e for _, e in records[1:]]
    return {"completions_per_s": completions_per_s(config, [t for t, _ in records]),
            **{part: statistics.mean(e[part] for e in counted) for part in PARTS},
            "steps": [step_figures(e["step"], [len(r["response_ids"]) for r in step], [r["reward"] for r in step],
                                   config.group_size, e["loss"], e["grad_norm"])
                      for (_, e), step in zip(records, rows, strict=True)]}


def run_trl(local: Path, config: ReasoningRlConfig, plan: list[list[RlPrompt]], threads: int, dense: bool) -> dict:
    from datasets import Dataset
    from transformers import ProgressCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from model.dsa import install_dsa_indexers, set_dense_attention
    from model.presets import load_model
    from stages.grpo.loop import load_rewards
    from stages.grpo.rewards import group_rewards

    torch.set_num_threads(threads)
    tokenizer, model = load_tokenizer(local), load_model(local)
    for indexer in install_dsa_indexers(model):
        indexer.requires_grad_(False)  # RL leaves the indexer as SFT trained it (stages/common/policy.py)
    # Dense skips the indexer altogether (score_keys=False), as the committed evaluation's dense mode does.
    set_dense_attention(model, dense=dense, score_keys=not dense)
    rewards, _ = load_rewards(config)
    by_id = {prompt.id: prompt for step in plan for prompt in step}
    group = config.group_size
    scored_steps: list[tuple[list[str], list[int], list[float]]] = []

    def reward(completion_ids, **columns) -> list[float | None]:
        # TRL repeats each prompt `group` times in a row (RepeatSampler): its groups are ours.
        ids = columns["id"][::group]
        groups = [by_id[i] for i in ids]
        # group_rewards reads a sample's output_ids only: the tokens TRL generated, stop token included.
        scored = group_rewards(groups, [SimpleNamespace(output_ids=c) for c in completion_ids], group, rewards,
                               tokenizer, config.reward_timeout_s)
        totals = scored.total.flatten().tolist()
        scored_steps.append((ids, [len(c) for c in completion_ids], totals))
        # None where a module could not score it: TRL gives such a completion no advantage.
        return [total if all(entry["score"] is not None for entry in scores) else None
                for total, scores in zip(totals, scored.scores, strict=True)]

    class Steps(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []
            self.logs: list[dict] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.monotonic())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "grad_norm" in logs:  # a step's log, not the run's summary at the end
                self.logs.append(logs)

    # The prompts as the ids our engine is given: TRL tokenizes the text back, checked to give the same ids.
    texts = [(tokenizer.decode(p.prompt_ids, skip_special_tokens=False), p) for step in plan for p in step]
    if any(tokenizer(text)["input_ids"] != p.prompt_ids for text, p in texts):
        raise SystemExit("TRL would tokenize the prompts' text to other ids than our engine is given")
    data = Dataset.from_list([{"prompt": text, "id": p.id} for text, p in texts])
    with tempfile.TemporaryDirectory(prefix="grpo-trl-") as tmp:
        steps = Steps()
        args = GRPOConfig(output_dir=tmp, **trl_args(config, torch.cuda.is_available()))
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                              processing_class=tokenizer, callbacks=[steps])
        trainer.remove_callback(ProgressCallback)  # its bar, and a copy of every log on stdout: the steps print here
        trainer.train()
    checked_prompts("TRL", [ids for ids, _, _ in scored_steps], plan)
    return {"completions_per_s": completions_per_s(config, steps.ends),
            "steps": [step_figures(index + 1, lengths, totals, group, logs["loss"], logs["grad_norm"])
                      for index, ((_, lengths, totals), logs) in enumerate(zip(scored_steps, steps.logs, strict=True))]}


def printed(arm: str, run: Callable[[int], dict]) -> Callable[[int], dict]:
    """`run`, printing each of its steps' figures and its rate as it ends."""
    def each_round(index: int) -> dict:
        result = run(index)
        for step in result["steps"]:
            print(json.dumps({"arm": arm, "round": index, **step}), flush=True)
        print(json.dumps({"arm": arm, "round": index, "completions_per_s": result["completions_per_s"]}), flush=True)
        return result
    return each_round


def dead_runs(runs: dict[str, list[dict]]) -> list[str]:
    """The runs that did not train: a throughput taken from them says nothing about a GRPO step."""
    dead = []
    for arm, results in runs.items():
        for index, result in enumerate(results):
            if not any(step["reward_mean"] for step in result["steps"]):
                dead.append(f"{arm} round {index}: every reward is 0")
            if not any(step["grad_norm"] > 0 for step in result["steps"]):  # NaN (a skipped step) is not > 0
                dead.append(f"{arm} round {index}: every grad norm is 0")
    return dead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="artifacts", help="the demo's store (the bench writes nothing there)")
    parser.add_argument("--checkpoint", default="sft:latest")
    parser.add_argument("--steps", type=int, default=5, help="per run, the first of them warm-up (at least 2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of every arm (at least 3)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weight-sync", choices=["distributed", "disk"], default="distributed")
    parser.add_argument("--out", type=Path, help="also write the JSON document here")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 3:
        parser.error("--steps must be at least 2 (one warm-up, one counted) and --rounds at least 3")
    if find_spec("trl") is None:
        raise SystemExit("TRL is not installed: uv pip install -e '.[bench]'")
    host = machine()  # before the figures: the load they were taken under
    store = open_store(args.store)
    checkpoint = resolve_checkpoint(store, args.checkpoint, "--checkpoint")
    dataset = arith_prompts(store, checkpoint)
    config = recipe(args.steps, init_checkpoint=checkpoint, datasets=[dataset])
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        local = Path(open_artifact(checkpoint).download(Path(tmp) / "checkpoint", skip=("deepspeed/",)))
        plan = planned_prompts(config, dataset, load_tokenizer(local), Path(tmp) / "data")
        runs = alternate({
            "ours": printed("ours", lambda index: run_ours(store, checkpoint, dataset, plan, args.steps, args.threads,
                                                           args.weight_sync, f"{index}-{time.time_ns()}")),
            "trl-sparse": printed("trl-sparse", lambda index: run_trl(local, config, plan, args.threads, dense=False)),
            "trl-dense": printed("trl-dense", lambda index: run_trl(local, config, plan, args.threads, dense=True)),
        }, args.rounds)
    rates = {arm: [r["completions_per_s"] for r in runs[arm]] for arm in ARMS}
    summary = {
        "bench": "grpo_step", "checkpoint": checkpoint, "dataset": dataset, "steps": args.steps, "rounds": args.rounds,
        "threads": args.threads, "weight_sync": args.weight_sync, "recipe": config.model_dump(include={
            "prompts_per_step", "group_size", "oversample", "dynamic_sampling", "rewards", "sampling", "optimizer",
            "objective"}),
        "trl_args": trl_args(config, torch.cuda.is_available()),
        "machine": host,
        "arms": {arm: {"completions_per_s": spread(rates[arm]),
                       # Counted steps only, as the rate: a longer completion costs more to generate and train.
                       "completion_length": spread([statistics.mean(s["completion_length"] for s in r["steps"][1:])
                                                    for r in runs[arm]]),
                       **({part: spread([r[part] for r in runs[arm]]) for part in PARTS} if arm == "ours" else {})}
                 for arm in ARMS},
        "runs": runs,
    }
    dead = dead_runs(runs)
    if dead:
        summary["refused"] = dead
    else:
        summary["ratios"] = {f"ours/{arm}": ratio_spread(rates["ours"], rates[arm]) for arm in ARMS[1:]}
    document = json.dumps(summary, indent=2)
    print(document)
    if args.out:
        args.out.write_text(document + "\n")
    if dead:
        print("\n!!! NO RATIO: a run did not train, so its speed is not a GRPO step's:\n!!! " + "\n!!! ".join(dead),
              file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
