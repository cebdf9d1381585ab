"""Decode tokens/s of our rollout engine against transformers' `model.generate`, same checkpoint and batch.

Both run in this process on one freshly initialised checkpoint (`--model`), on the same device (CUDA when
present) and in the same precision (`--precision`; auto: bf16 on a GPU), with the same attention (sparse DSA)
and the same stopping rule: `--new-tokens` tokens for `--batch` random prompts of `--prompt-len` tokens, stop
tokens ignored so every row decodes the same number of tokens, sampled at `--temperature` as RL rollouts are
(0: greedy). The engine is timed without HTTP (its `generate`), so the figure compares the decoding loops. The
same engine served over HTTP (`rollout.engine.server`, in its own process, warmed with one whole batch) is timed
as `engine_http`, with logprobs returned; `http_hop_cost` is the share of in-process throughput the hop loses.

The three alternate in rotating order (bench/rounds.py) for at least 3 rounds; each figure is the median over
rounds with its min and max, the ratios are per round, never best-of; load average and versions are recorded.

    .venv/bin/python bench/rollout_throughput.py [--batch 64 --prompt-len 48 --new-tokens 64 --rounds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import GenerationConfig

# Run as a script, its folder is on sys.path, not the repository's (where bench/rounds.py is found as bench.rounds).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from model.device import resolved_precision  # noqa: E402
from model.dsa import install_dsa_indexers, set_dense_attention  # noqa: E402
from model.presets import PRESETS, build_model, load_model  # noqa: E402
from model.tokenizer import build_tokenizer_dir, load_tokenizer  # noqa: E402
from rollout.engine.generation import Engine  # noqa: E402
from rollout.process import EngineProcess  # noqa: E402
from rollout.protocol import SamplingParams, UniformBatch  # noqa: E402
from suites.tokenizer_corpus import suite_conversations  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=sorted(PRESETS), default="glm5-tiny")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 decodes greedily")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3, so the median and range mean something")
    torch.set_num_threads(args.threads)
    before = machine()

    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        tokenizer = load_tokenizer(build_tokenizer_dir(Path(tmp) / "tokenizer", suite_conversations()))
        build_model(args.model, tokenizer, seed=0).save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        prompts = torch.randint(10, len(tokenizer), (args.batch, args.prompt_len),
                                generator=torch.Generator().manual_seed(0)).tolist()

        engine = Engine(checkpoint, precision=args.precision)
        request = UniformBatch(prompts, SamplingParams(temperature=args.temperature, max_new_tokens=args.new_tokens,
                                                       ignore_eos=True, sampling_seed=0))
        reference = load_model(checkpoint, dtype=engine.dtype).to(engine.device).eval()
        install_dsa_indexers(reference)
        set_dense_attention(reference, dense=False)
        sampling = {"do_sample": True, "temperature": args.temperature, "top_k": 0} if args.temperature > 0 \
            else {"do_sample": False}
        config = GenerationConfig(**sampling, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=None, use_cache=True)
        ids = torch.tensor(prompts, device=engine.device)

        def run_engine() -> int:
            completions, _ = engine.generate(request)
            return sum(len(c.output_ids) for c in completions)

        def run_generate() -> int:
            with torch.inference_mode():
                out = reference.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
            return (out.shape[1] - ids.shape[1]) * out.shape[0]

        with EngineProcess(str(checkpoint), Path(tmp) / "engine.log", precision=args.precision) as client:
            def run_http() -> int:
                samples = client.generate(prompts, request.sampling, return_logprob=True)
                return sum(len(s.output_ids) for s in samples)

            def timed(run):
                def once(_round: int) -> dict:
                    started = time.perf_counter()
                    tokens = run()
                    return {"tokens_per_s": tokens / (time.perf_counter() - started), "tokens": tokens}
                return once

            run_http()  # warm-up: the served engine's first whole batch, as the in-process one gets below
            runs = alternate({"engine": timed(run_engine), "transformers_generate": timed(run_generate),
                              "engine_http": timed(run_http)}, args.rounds)

    rates = {name: [run["tokens_per_s"] for run in arm] for name, arm in runs.items()}
    print(json.dumps({
        "tokens_per_s": {name: spread(values) for name, values in rates.items()},
        "engine_over_generate": ratio_spread(rates["engine"], rates["transformers_generate"]),
        # What the HTTP hop costs, per round: the share of in-process decode throughput lost by serving over HTTP.
        "http_hop_cost": spread([1 - http / local for http, local in zip(rates["engine_http"], rates["engine"],
                                                                         strict=True)]),
        "tokens_per_run": {name: arm[0]["tokens"] for name, arm in runs.items()},
        "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "temperature": args.temperature, "attention": "sparse (DSA) on both sides",
        "rounds": args.rounds, "threads": args.threads, "model": args.model,
        "device": "cuda" if torch.cuda.is_available() else "cpu", "precision": resolved_precision(args.precision),
        "machine": before,
    }, indent=2))


if __name__ == "__main__":
    main()
