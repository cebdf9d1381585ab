"""One GRPO step split into generate / reward / train / push, ours against TRL's GRPOTrainer on one checkpoint.

Ours is the reasoning RL stage job as the pipeline runs it (its engine over HTTP, its reward modules,
DeepSpeed, the configured weight push), on the demo's SFT checkpoint: 4 prompts × 8 responses of up to 64
new tokens per step, on the demo's arith prompts, rewarded as the demo rewards them (exact match + 0.5 ×
step prefix). Its step records carry generate_s, reward_s, train_s and push_s. TRL, when installed
(`uv pip install -e '.[bench]'`), runs GRPOTrainer on the same checkpoint (served with the same sparse
attention), prompts (rendered by the same chat template), group size, lengths, temperature, learning rate
and rewards, generating in its own process with transformers. The two alternate for `--rounds`, each for
`--steps` steps; the first step of every run is warm-up and not counted. Completions per second are
counted between the end of the first step and the end of the last, from the step records' arrival (ours)
or TRL's step-end callback.

    .venv/bin/python bench/grpo_step.py --store artifacts [--checkpoint sft:latest --steps 5 --rounds 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from infra.launch import run_stage_job
from infra.launchers.local import LocalLaunch
from infra.references import resolve_checkpoint
from infra.store import open_artifact, open_store
from stages.common.events import parse_event
from stages.grpo.config import ReasoningRlConfig

PROMPTS, GROUP, NEW_TOKENS, LR = 4, 8, 64, 1e-4
REWARDS = [{"path": "rewards.verifiers.ArithExactMatch"}, {"path": "rewards.verifiers.ArithStepPrefix", "weight": 0.5}]
PARTS = ("generate_s", "reward_s", "train_s", "push_s")


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


def scratch_copy(store, uris: list[str], root: Path) -> list[str]:
    """The artifacts at `uris` in `store` (a folder on this machine) copied into a store at `root`: a stage
    reads its inputs from the store it writes to, and the bench writes nothing into the demo's."""
    source = Path(urlsplit(store.root_uri).path)
    names = [uri.removeprefix(store.root_uri).strip("/") for uri in uris]
    for name in names:
        shutil.copytree(source / name, root / name)
    return [open_store(str(root)).open(name).uri for name in names]


def run_ours(store, checkpoint: str, dataset: str, steps: int, threads: int, sync: str, tag: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="grpo-step-") as tmp:
        checkpoint, dataset = scratch_copy(store, [checkpoint, dataset], Path(tmp) / "store")
        config = ReasoningRlConfig(
            run_id=f"bench-{tag}", store=str(Path(tmp) / "store"), init_checkpoint=checkpoint, datasets=[dataset],
            prompts_per_step=PROMPTS, group_size=GROUP, oversample=1, max_steps=steps, rewards=REWARDS,
            sampling={"max_new_tokens": NEW_TOKENS}, optimizer={"lr": LR, "warmup_steps": 1}, checkpoint_every=10_000,
            engines={"weight_sync": sync})
        path = Path(tmp) / "run.json"
        path.write_text(config.model_dump_json())
        records: list[tuple[float, dict]] = []

        def on_line(line: str) -> None:
            event = parse_event(line)
            if event and event.get("event") == "step":
                records.append((time.monotonic(), event))

        run_stage_job(LocalLaunch(nproc=1, threads_per_proc=threads), "stages.grpo.reasoning", path, on_line)
    counted = records[1:]
    seconds = records[-1][0] - records[0][0]
    return {"completions_per_s": PROMPTS * GROUP * len(counted) / seconds,
            **{part: statistics.mean(e[part] for _, e in counted) for part in PARTS}}


def run_trl(checkpoint: str, dataset: str, steps: int, threads: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from model.dsa import install_dsa_indexers, set_dense_attention
    from model.presets import load_model
    from model.tokenizer import load_tokenizer
    from rewards.loading import load_reward_module, score_batch
    from rewards.protocol import RewardSample
    from stages.common.prompts import prompt_messages, reference_answer

    torch.set_num_threads(threads)
    modules = [(load_reward_module(r["path"]), r.get("weight", 1.0)) for r in REWARDS]

    def reward(prompts, completions, messages, reference, **_) -> list[float]:
        samples = [RewardSample(tuple(json.loads(m)), c, r, {"thinking": True})
                   for m, c, r in zip(messages, completions, reference, strict=True)]
        scores = [(score_batch(module, samples), weight) for module, weight in modules]
        return [sum(weight * (each[i] or 0.0) for each, weight in scores) for i in range(len(samples))]

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.monotonic())

    with tempfile.TemporaryDirectory(prefix="grpo-trl-") as tmp:
        local = Path(open_artifact(checkpoint).download(Path(tmp) / "checkpoint", skip=("deepspeed/",)))
        tokenizer = load_tokenizer(local)
        model = load_model(local)
        install_dsa_indexers(model)
        set_dense_attention(model, dense=False)  # served and trained sparse, as our stage does
        rows = pq.read_table(open_artifact(dataset).download(Path(tmp) / "data") / "train.parquet").to_pylist()
        prompts = [(prompt_messages(r), reference_answer(r)) for r in rows]
        data = Dataset.from_list([{
            "prompt": tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, enable_thinking=True,
                                                    tokenize=False),
            "messages": json.dumps(list(messages)), "reference": reference} for messages, reference in prompts])
        args = GRPOConfig(output_dir=tmp, per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
                          generation_batch_size=PROMPTS * GROUP, max_completion_length=NEW_TOKENS, max_steps=steps,
                          learning_rate=LR, warmup_steps=1, beta=0.0, temperature=1.0, logging_steps=1, report_to="none",
                          save_strategy="no", use_cpu=True, seed=0, bf16=False, log_completions=False)
        times = StepTimes()
        GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer,
                    callbacks=[times]).train()
    return {"completions_per_s": PROMPTS * GROUP * (len(times.ends) - 1) / (times.ends[-1] - times.ends[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="artifacts", help="the demo's store (the bench writes nothing there)")
    parser.add_argument("--checkpoint", default="sft:latest")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weight-sync", choices=["distributed", "disk"], default="distributed")
    args = parser.parse_args()
    store = open_store(args.store)
    checkpoint = resolve_checkpoint(store, args.checkpoint, "--checkpoint")
    dataset = arith_prompts(store, checkpoint)
    try:
        import trl  # noqa: F401  (the comparison is optional: a bench-only extra)
        with_trl = True
    except ImportError:
        with_trl = False
    ours, theirs = [], []
    for round_ in range(args.rounds):
        ours.append(run_ours(store, checkpoint, dataset, args.steps, args.threads, args.weight_sync, f"{round_}-{time.time_ns()}"))
        print(json.dumps({"round": round_, "ours": ours[-1]}), flush=True)
        if with_trl:
            theirs.append(run_trl(checkpoint, dataset, args.steps, args.threads))
            print(json.dumps({"round": round_, "trl": theirs[-1]}), flush=True)
    summary = {"checkpoint": checkpoint, "dataset": dataset, "prompts": PROMPTS, "group": GROUP,
               "new_tokens": NEW_TOKENS, "weight_sync": args.weight_sync,
               "ours": {key: statistics.mean(r[key] for r in ours) for key in ours[0]}}
    if theirs:
        summary["trl_completions_per_s"] = statistics.mean(r["completions_per_s"] for r in theirs)
        summary["ours_over_trl"] = summary["ours"]["completions_per_s"] / summary["trl_completions_per_s"]
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
