"""DSA attention at long context: our sparse-gather against the best dense attention and transformers' DSA path.

One attention layer of a GLM-5 preset (MLA with its DSA indexer, random weights and inputs, batch 1, float32),
timed three ways in the same process. Like for like: the same weights, inputs, thread count and precision, and
each arm does what its own library does for this layer, nothing more:

  dense   the best dense attention transformers offers for this layer, with no DSA: its MLA projections and
          `expand_kv` (the latents expanded to every head's keys and values, as GlmMoeDsaAttention does), then
          transformers' own `sdpa_attention_forward` with attention_mask=None, which hands SDPA `is_causal=True`
          for a sequence. No indexer, no [S, T] mask, no index tensor. Decoding, the same with a KV cache: one
          query attends to every cached key, unmasked (transformers' MLA decode). That decode expands the whole
          cached latent through kv_b_proj every step, where gather's absorbed weights read latent rows as they
          are: its decode ratio measures absorption as well as sparsity.
  gather  ours (model/dsa.py's DsaAttention, model/dsa_gather.py): the chunked indexer picks each query's top-k,
          attention reads only those keys' latent rows (MLA weight absorption). Up to 8 × the top-k keys,
          DsaAttention applies the selection as a mask over SDPA instead (model/dsa_gather.py, measured cheaper
          there): at the default lengths (2K–16K, far above 8 × the preset's top-k) that never happens, and each
          length reports `gather_runs_sparse`.
  masked  transformers' reference DSA path (GlmMoeDsaAttention under SDPA): its own indexer (every query's scores
          for every key and head at once, then torch.topk), the top-k turned into a mask over SDPA attention over
          every key.

gather and masked get the [1, 1, S, T] boolean causal mask that GlmMoeDsaModel builds for them (it forces one,
`allow_is_causal_skip=False`, because the indexer reads it), built inside the timed step as the model builds it
per forward; dense needs none. The top-k is the preset's (model/presets.py), or `--index-topk`, and is printed.

Before timing, a check that the fair dense arm computes the same attention as the layer run densely the explicit
way (transformers' forward under SDPA with our indexer switched off, selecting every key under the explicit
causal mask, the path the dense model takes): outputs allclose, forward and one decoding step, at CHECK_LENGTH.

For each context length: forward+backward of the whole sequence (training; the indexer frozen, as in RL), and
decoding steps over a KV cache of that many tokens (serving; time per step). Rounds alternate (bench/rounds.py:
every arm once per round, the order rotating); each arm's median with min and max over rounds, never best-of,
and the per-round ratios gather/dense and masked/dense (a time ratio: below 1 is faster than dense). Peak is the
resident memory above the start of the measurement, sampled every millisecond, with the memory freed before it
handed back to the system first (malloc_trim, so one measurement's leftovers do not hide the next one's peak), the
maximum over rounds. The allocator is glibc's as a user's process has it.
An arm that needs more than `--memory-limit-gib` of address space is reported as OOM (null) and not run again at
that length. The load average and versions come with the figures; the output is one JSON document.

    .venv/bin/python bench/dsa_attention.py                          # glm5-small, 2K–16K, 3 rounds
    .venv/bin/python bench/dsa_attention.py --lengths 2048 4096 --rounds 5
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import functools
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from transformers import GlmMoeDsaConfig  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402
from transformers.masking_utils import sdpa_mask  # noqa: E402
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (  # noqa: E402
    GlmMoeDsaAttention,
    GlmMoeDsaRotaryEmbedding,
)

from bench.rounds import alternate, machine, ratio_spread, spread  # noqa: E402
from model.dsa import install_dsa_indexers, masks_selection, mla_projections  # noqa: E402
from model.dsa_gather import SPARSE_GATHER  # noqa: E402
from model.presets import PRESETS  # noqa: E402

ARMS = ("dense", "gather", "masked")
# How transformers' layer forward runs each path that goes through it: (attention implementation, indexer,
# indexer selects every key). "explicit dense" is only the correctness check's reference, never timed.
ROUTES = {"gather": (SPARSE_GATHER, "ours", False), "masked": ("sdpa", "stock", False),
          "explicit dense": ("sdpa", "ours", True)}
CHECK_LENGTH = 512
PAGE = 4096


class PeakMemory:
    """Resident memory above the start of a block, sampled every millisecond on a thread."""

    def __init__(self):
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)  # read for the whole run
        self.peak = 0

    def _resident(self) -> int:
        # pread: the sampling thread and the block's end read it at once, each at offset 0.
        return int(os.pread(self._statm, 256, 0).split()[1]) * PAGE

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


# The allocator is left as a user's process has it. An earlier version gave every allocation over 64 KiB its own
# mapping (mallopt M_MMAP_THRESHOLD) so that freed memory left the process at once: each such allocation then
# faulted its pages in anew, which cost the arm that allocates per chunk (gather) 3.5 s of system time per
# forward+backward at 16K. `malloc_trim` before each measurement hands freed memory back instead.
_libc = ctypes.CDLL("libc.so.6")


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


def route(path: str, config, layer, indexers) -> None:
    config._attn_implementation, indexer, every_key = ROUTES[path]
    layer.indexer = indexers[indexer]
    indexers["ours"].dense, indexers["ours"].score_keys = every_key, not every_key  # every key: skip the scoring


def dense_attention(layer, hidden, embeddings, cache=None):
    """The dense arm: GlmMoeDsaAttention.forward's MLA without the indexer and without a mask. With no mask,
    transformers' `sdpa_attention_forward` sets SDPA's `is_causal` for more than one query; one decoded query
    attends to every cached key, as it should."""
    batch_size, seq_length = hidden.shape[:-1]
    _, q_pass, q_rot, k_pass, k_rot = mla_projections(layer, hidden, embeddings)
    if cache is not None:
        k_pass, k_rot = cache.update(k_pass, k_rot, layer.layer_idx)
    key_states, value_states = layer.expand_kv(k_pass, k_rot)
    output, _ = sdpa_attention_forward(layer, torch.cat((q_pass, q_rot), dim=-1), key_states, value_states, None,
                                       dropout=layer.attention_dropout if layer.training else 0.0,
                                       scaling=layer.scaling, is_causal=True)
    return layer.o_proj(output.reshape(batch_size, seq_length, -1))


def causal_mask(length: int, past: int = 0):
    """The [1, 1, S, T] boolean mask GlmMoeDsaModel builds for the DSA paths (never skipped: the indexer reads it)."""
    return sdpa_mask(batch_size=1, q_length=length - past, kv_length=length, q_offset=past, allow_is_causal_skip=False)


def forward(arm: str, layer, rotary, hidden, length: int, cache=None):
    """The layer's output for `hidden`, the last `hidden.shape[1]` of `length` tokens (the rest in `cache`)."""
    past = length - hidden.shape[1]
    embeddings = rotary(hidden, torch.arange(past, length).unsqueeze(0))
    if arm == "dense":
        return dense_attention(layer, hidden, embeddings, cache)
    return layer(hidden, embeddings, causal_mask(length, past), cache=cache)[0]


def train_step(arm, layer, rotary, hidden, length):
    forward(arm, layer, rotary, hidden, length).float().square().mean().backward()


@torch.no_grad()
def decode_steps(arm, layer, rotary, tokens, cache, length):
    for step, token in enumerate(tokens):
        forward(arm, layer, rotary, token, length + step, cache)


@torch.no_grad()
def filled_cache(layer, rotary, config, indexers, hidden):
    """A KV cache of the context (latent K/V and indexer keys), filled once by the gather path."""
    route("gather", config, layer, indexers)
    cache = DynamicCache(config=config)
    forward("gather", layer, rotary, hidden, hidden.shape[1], cache)
    return cache


@torch.no_grad()
def dense_check(layer, rotary, config, indexers, seed: int) -> dict:
    """The dense arm against the explicit dense path (module docstring): forward, and one decoding step over a
    cache of the rest. Each row: the largest absolute difference and whether the outputs are allclose."""
    hidden = torch.randn(1, CHECK_LENGTH, config.hidden_size, generator=torch.Generator().manual_seed(seed))
    context = filled_cache(layer, rotary, config, indexers, hidden[:, :-1])
    route("explicit dense", config, layer, indexers)
    pairs = {"forward": (forward("dense", layer, rotary, hidden, CHECK_LENGTH),
                         forward("explicit dense", layer, rotary, hidden, CHECK_LENGTH)),
             "decode": (forward("dense", layer, rotary, hidden[:, -1:], CHECK_LENGTH, copy.deepcopy(context)),
                        forward("explicit dense", layer, rotary, hidden[:, -1:], CHECK_LENGTH, copy.deepcopy(context)))}
    return {"length": CHECK_LENGTH, "reference": "transformers' GlmMoeDsaAttention.forward under SDPA, indexer "
            "skipped (every key selected), explicit boolean causal mask", "rtol": 1e-5, "atol": 1e-5} | {
        kind: {"max_abs_diff": (ours - reference).abs().max().item(),
               "allclose": torch.allclose(ours, reference, rtol=1e-5, atol=1e-5)}
        for kind, (ours, reference) in pairs.items()}


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


def run_arm(arm: str, _round: int, layer, rotary, config, indexers, hidden, tokens, context, out_of_memory: set) -> dict:
    """One round of one arm: forward+backward, then the decoding steps over a fresh copy of the context's cache."""
    if arm in out_of_memory:  # out of memory once at this length: every round would be
        return {"train": None, "decode": None}
    if arm in ROUTES:
        route(arm, config, layer, indexers)
    layer.zero_grad(set_to_none=True)
    run = {"train": measure(train_step, arm, layer, rotary, hidden.clone().requires_grad_(True), hidden.shape[1]),
           "decode": measure(decode_steps, arm, layer, rotary, tokens, copy.deepcopy(context), hidden.shape[1])}
    if None in run.values():
        out_of_memory.add(arm)
    return run


def summary(runs: dict[str, list[dict]], kind: str, per: int) -> dict:
    """Each arm's seconds (divided by `per`) and peak MiB over rounds, and the per-round ratios to dense."""
    figures = {arm: [run[kind] for run in arm_runs] for arm, arm_runs in runs.items()}
    complete = {arm: measured for arm, measured in figures.items() if None not in measured}
    seconds = {arm: [s / per for s, _ in measured] for arm, measured in complete.items()}
    return {
        "seconds": {arm: spread(seconds[arm]) if arm in seconds else None for arm in ARMS},  # None: out of memory
        "peak_mib": {arm: round(max(peak for _, peak in complete[arm]), 1) if arm in complete else None
                     for arm in ARMS},
        "time_over_dense": {arm: ratio_spread(seconds[arm], seconds["dense"])
                            if arm in seconds and "dense" in seconds else None for arm in ("gather", "masked")},
    }


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
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3, so that the median and the range say something")
    torch.set_num_threads(args.threads)
    limit = int(args.memory_limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    loads = machine()  # before any figure is taken

    config, layer, indexers, rotary = attention_layer(
        args.preset, max(args.lengths + [CHECK_LENGTH]) + args.decode_steps, args.seed, args.index_topk)
    check = dense_check(layer, rotary, config, indexers, args.seed)
    results = []
    for length in args.lengths:
        generator = torch.Generator().manual_seed(args.seed + length)
        hidden = torch.randn(1, length, config.hidden_size, generator=generator)
        tokens = torch.randn(args.decode_steps, 1, 1, config.hidden_size, generator=generator)
        context = filled_cache(layer, rotary, config, indexers, hidden[:, :-1])
        arm = functools.partial(run_arm, layer=layer, rotary=rotary, config=config, indexers=indexers, hidden=hidden,
                                tokens=tokens, context=context, out_of_memory=set())
        runs = alternate({name: functools.partial(arm, name) for name in ARMS}, args.rounds)
        gathers = not masks_selection(config, 1, length, length, config.index_topk)
        results.append({"length": length, "gather_runs_sparse": gathers, "train": summary(runs, "train", 1),
                        "decode_per_step": summary(runs, "decode", args.decode_steps)})

    print(json.dumps({
        "bench": "dsa_attention", "preset": args.preset, "index_topk": config.index_topk,
        "index_topk_from": "--index-topk" if args.index_topk else f"model/presets.py {args.preset}",
        "arms": {"dense": "transformers' MLA (projections, expand_kv) + transformers' sdpa_attention_forward, "
                          "attention_mask=None so SDPA is_causal=True; no indexer; decode: transformers' MLA decode "
                          "(cache expanded, one query over every key)",
                 "gather": "ours: model/dsa.py DsaAttention, sparse-gather over the indexer's top-k "
                           "(model/dsa_gather.py)",
                 "masked": "transformers' reference DSA path: its indexer + top-k mask over SDPA"},
        "dense_check": check, "threads": args.threads, "rounds": args.rounds, "decode_steps": args.decode_steps,
        "dtype": "float32", "machine": loads, "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()
