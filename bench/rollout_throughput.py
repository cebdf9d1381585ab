"""Decode tokens/s of our rollout engine against transformers' `model.generate`, same checkpoint and batch.

Both run in this process, alternating, on one freshly initialised checkpoint (`--model`), on the same
device (CUDA when present) and in the same precision (`--precision`; auto: bf16 on a GPU): greedy decoding of
`--new-tokens` tokens for `--batch` random prompts of `--prompt-len` tokens, stop tokens ignored so
every row decodes the same number of tokens. The engine is timed without HTTP (its `generate`), so
the figure compares the decoding loops. The same engine served over HTTP (`rollout.engine.server`, in its own
process, warmed with one whole batch) is timed in the same alternation as `engine_http`, with logprobs
returned; `http_hop_cost` is the share of in-process throughput the hop loses.

    .venv/bin/python bench/rollout_throughput.py [--batch 64 --prompt-len 48 --new-tokens 64 --rounds 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import GenerationConfig

from model.device import resolved_precision
from model.dsa import install_dsa_indexers, set_dense_attention
from model.presets import PRESETS, build_model, load_model
from model.tokenizer import build_tokenizer_dir, load_tokenizer
from rollout.engine.generation import Engine
from rollout.process import EngineProcess
from rollout.protocol import SamplingParams, UniformBatch
from suites.tokenizer_corpus import suite_conversations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", choices=sorted(PRESETS), default="glm5-tiny")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        tokenizer = load_tokenizer(build_tokenizer_dir(Path(tmp) / "tokenizer", suite_conversations()))
        build_model(args.model, tokenizer, seed=0).save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        prompts = torch.randint(10, len(tokenizer), (args.batch, args.prompt_len),
                                generator=torch.Generator().manual_seed(0)).tolist()

        engine = Engine(checkpoint, precision=args.precision)
        request = UniformBatch(prompts, SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, ignore_eos=True))
        reference = load_model(checkpoint, dtype=engine.dtype).to(engine.device).eval()
        install_dsa_indexers(reference)
        set_dense_attention(reference, dense=False)
        config = GenerationConfig(do_sample=False, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
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

            run_http()  # warm-up: the served engine's first whole batch, as the in-process one gets below
            timings = {"engine": [], "transformers_generate": [], "engine_http": []}
            for _ in range(args.rounds):  # alternating, so a slower stretch of the machine hits all three
                for name, run in (("engine", run_engine), ("transformers_generate", run_generate), ("engine_http", run_http)):
                    started = time.perf_counter()
                    tokens = run()
                    timings[name].append(tokens / (time.perf_counter() - started))

    best = {name: max(values) for name, values in timings.items()}
    print(json.dumps({
        "engine_tokens_per_s": round(best["engine"], 1),
        "transformers_generate_tokens_per_s": round(best["transformers_generate"], 1),
        "ratio": round(best["engine"] / best["transformers_generate"], 3),
        "engine_http_tokens_per_s": round(best["engine_http"], 1),
        # What the HTTP hop costs: the share of in-process decode throughput lost by serving over HTTP.
        "http_hop_cost": round(1 - best["engine_http"] / best["engine"], 3),
        "batch": args.batch, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "rounds": args.rounds, "threads": args.threads, "model": args.model,
        "device": "cuda" if torch.cuda.is_available() else "cpu", "precision": resolved_precision(args.precision),
    }, indent=2))


if __name__ == "__main__":
    main()
