"""DSA attention at long context: sparse-gather vs transformers' masked path vs dense attention.

One attention layer of a GLM-5 preset (MLA with its DSA indexer, random weights and inputs, batch 1), timed
three ways in the same process, the three alternating within every round so that machine noise hits each
alike:
  gather  our sparse-gather attention (model/dsa_gather.py): the chunked indexer picks each query's top-k,
          attention reads only those keys' K/V
  masked  transformers' DSA path: its own indexer (every query's scores for every key and head at once, then
          torch.topk) and the top-k turned into a mask over SDPA attention over every key
  dense   SDPA attention over every key, no indexer (what the model costs without DSA)
For each context length: forward+backward of the whole sequence (training; the indexer frozen, as in RL),
and one decoding step over a KV cache of that many tokens (serving). Time is the median over rounds; peak is
the resident memory above the start of the measurement, sampled every millisecond, with freed memory handed
back to the system right away (so one measurement's leftovers do not hide the next one's peak). A variant that
needs more than `--memory-limit-gib` of address space is reported as OOM.

    .venv/bin/python bench/dsa_attention.py                       # glm5-small, 2K–16K, 3 rounds
    .venv/bin/python bench/dsa_attention.py --lengths 2048 4096 --rounds 2 --json
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transformers import GlmMoeDsaConfig  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.masking_utils import sdpa_mask  # noqa: E402
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (  # noqa: E402
    GlmMoeDsaAttention,
    GlmMoeDsaRotaryEmbedding,
)

from model.dsa import install_dsa_indexers  # noqa: E402
from model.dsa_gather import SPARSE_GATHER  # noqa: E402
from model.presets import PRESETS  # noqa: E402

VARIANTS = ("gather", "masked", "dense")
# (attention implementation, indexer dense) per variant
SETTINGS = {"gather": (SPARSE_GATHER, False), "masked": ("sdpa", False), "dense": ("sdpa", True)}
PAGE = 4096


class PeakMemory:
    """Resident memory above the start of a block, sampled every millisecond on a thread."""

    def __init__(self):
        self._statm = open("/proc/self/statm")  # noqa: SIM115 - read for the whole run
        self.peak = 0

    def _resident(self) -> int:
        self._statm.seek(0)
        return int(self._statm.read().split()[1]) * PAGE

    def __enter__(self):
        _libc.malloc_trim(0)
        self._start, self.peak, self._running = self._resident(), 0, True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while self._running:
            self.peak = max(self.peak, self._resident() - self._start)
            time.sleep(0.001)

    def __exit__(self, *exc):
        self.peak = max(self.peak, self._resident() - self._start)
        self._running = False
        self._thread.join()


_libc = ctypes.CDLL("libc.so.6")
# Every allocation over 64 KiB gets its own mapping, returned to the system when freed (glibc otherwise raises
# the threshold after frees and keeps big blocks in its heap, where a later measurement reuses them unseen).
_libc.mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD


def attention_layer(preset: str, max_positions: int, seed: int, index_topk: int | None = None):
    """The layer, with ours and transformers' indexer over the same weights, frozen as in RL (they only select)."""
    shape = PRESETS[preset] | ({"index_topk": index_topk} if index_topk else {})
    config = GlmMoeDsaConfig(vocab_size=64, max_position_embeddings=max_positions, **shape)
    torch.manual_seed(seed)
    layer = GlmMoeDsaAttention(config, layer_idx=1)
    stock = layer.indexer
    [ours] = install_dsa_indexers(torch.nn.ModuleList([layer]))  # takes over the stock indexer's submodules
    ours.requires_grad_(False)
    return config, layer, {"ours": ours, "stock": stock}, GlmMoeDsaRotaryEmbedding(config)


def use(variant: str, config, layer, indexers) -> None:
    config._attn_implementation, dense = SETTINGS[variant]
    layer.indexer = indexers["stock" if variant == "masked" else "ours"]
    indexers["ours"].dense, indexers["ours"].score_keys = dense, not dense  # dense attention skips the indexer


def causal_mask(length: int, past: int = 0):
    """The [1, 1, S, T] boolean mask transformers builds for SDPA (and for sparse-gather)."""
    return sdpa_mask(batch_size=1, q_length=length - past, kv_length=length, q_offset=past, allow_is_causal_skip=False)


def train_step(layer, rotary, config, hidden, length):
    positions = torch.arange(length).unsqueeze(0)
    embeddings = rotary(hidden, positions)
    output = layer(hidden, embeddings, causal_mask(length))[0]
    output.float().square().mean().backward()


@torch.no_grad()
def decode_step(layer, rotary, config, token, cache, length):
    positions = torch.tensor([[length - 1]])
    embeddings = rotary(token, positions)
    layer(token, embeddings, causal_mask(length, past=length - 1), cache=cache)


@torch.no_grad()
def filled_cache(layer, rotary, config, indexers, hidden):
    """A KV cache of the context (latent K/V and indexer keys), filled once by the gather path."""
    use("gather", config, layer, indexers)
    cache = DynamicCache(config=config)
    length = hidden.shape[1]
    layer(hidden, rotary(hidden, torch.arange(length).unsqueeze(0)), causal_mask(length), cache=cache)
    return cache


def measure(fn, *args) -> tuple[float, float] | None:
    """(seconds, peak MiB), or None when the work ran out of the address space `--memory-limit-gib` allows."""
    with PeakMemory() as memory:
        start = time.perf_counter()
        try:
            fn(*args)
        except (RuntimeError, MemoryError) as error:  # torch reports a failed allocation as a RuntimeError
            if "alloc" not in str(error).lower() and not isinstance(error, MemoryError):
                raise
            return None
        seconds = time.perf_counter() - start
    return seconds, memory.peak / 2**20


def decode_steps(layer, rotary, config, tokens, cache, length):
    for step, token in enumerate(tokens):
        decode_step(layer, rotary, config, token, cache, length + step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="glm5-small", choices=sorted(PRESETS))
    parser.add_argument("--index-topk", type=int, help="keys each query selects; default the preset's")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decode-steps", type=int, default=8, help="decoding steps per measurement")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-limit-gib", type=float, default=20.0,
                        help="address space the process may use: a variant that needs more is reported as out of "
                             "memory instead of the kernel killing the run")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    limit = int(args.memory_limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    config, layer, indexers, rotary = attention_layer(
        args.preset, max(args.lengths) + args.decode_steps, args.seed, args.index_topk)
    results = []
    for length in args.lengths:
        generator = torch.Generator().manual_seed(args.seed + length)
        hidden = torch.randn(1, length, config.hidden_size, generator=generator)
        tokens = torch.randn(args.decode_steps, 1, 1, config.hidden_size, generator=generator)
        context = filled_cache(layer, rotary, config, indexers, hidden[:, :-1])
        samples = {variant: {"train": [], "decode": []} for variant in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                if None in samples[variant]["train"]:  # out of memory once: every round would be
                    continue
                use(variant, config, layer, indexers)
                layer.zero_grad(set_to_none=True)
                samples[variant]["train"].append(measure(
                    train_step, layer, rotary, config, hidden.clone().requires_grad_(True), length))
                samples[variant]["decode"].append(measure(
                    decode_steps, layer, rotary, config, tokens, copy.deepcopy(context), length))
        for variant in VARIANTS:
            row = {"length": length, "variant": variant}
            for kind, measured in samples[variant].items():
                if None in measured:
                    row[f"{kind}_s"] = row[f"{kind}_peak_mib"] = None  # out of memory
                    continue
                seconds = statistics.median(s for s, _ in measured)
                row[f"{kind}_s"] = round(seconds / (args.decode_steps if kind == "decode" else 1), 5)
                row[f"{kind}_peak_mib"] = round(max(peak for _, peak in measured), 1)
            results.append(row)
        by_variant = {row["variant"]: row for row in results if row["length"] == length}
        for row in by_variant.values():
            for kind in ("train", "decode"):
                dense, own = by_variant["dense"][f"{kind}_s"], row[f"{kind}_s"]
                row[f"{kind}_speedup_vs_dense"] = round(dense / own, 2) if dense and own else None
        if not args.json:
            print_rows(list(by_variant.values()), first=length == args.lengths[0])

    summary = {"preset": args.preset, "index_topk": config.index_topk, "threads": args.threads,
               "rounds": args.rounds, "decode_steps": args.decode_steps, "results": results}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"\n{args.preset}: index_topk {config.index_topk}, {args.threads} threads, median of {args.rounds} "
              f"rounds; decode per step over a cache of the context")


def print_rows(rows: list[dict], first: bool) -> None:
    if first:
        print(f"{'context':>8} {'variant':>7} | {'fwd+bwd s':>9} {'× dense':>7} {'peak MiB':>9} | "
              f"{'decode ms':>9} {'× dense':>7} {'peak MiB':>9}")
    for row in rows:
        cells = [_cell(row["train_s"], 9, ".3f"), _cell(row["train_speedup_vs_dense"], 7, ".2f"),
                 _cell(row["train_peak_mib"], 9, ".1f"), _cell(row["decode_s"] and row["decode_s"] * 1000, 9, ".2f"),
                 _cell(row["decode_speedup_vs_dense"], 7, ".2f"), _cell(row["decode_peak_mib"], 9, ".1f")]
        print(f"{row['length']:>8} {row['variant']:>7} | {' '.join(cells[:3])} | {' '.join(cells[3:])}", flush=True)


def _cell(value, width: int, spec: str) -> str:
    return f"{'OOM':>{width}}" if value is None else f"{value:>{width}{spec}}"


if __name__ == "__main__":
    main()
