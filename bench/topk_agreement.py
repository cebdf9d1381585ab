"""What a checkpoint trained here computes elsewhere: our trainer's next-token logprobs against plain transformers'.

Our trainer and engine select each query's DSA keys by a tie-stable rule (model/dsa.py `stable_topk`: among equal
indexer scores the newest keys); transformers' `GlmMoeDsaForCausalLM` takes `torch.topk`'s choice, which promises
no order among ties. The indexer's ReLU scores tie often (at 0). Where a tie falls at the k-th score of a query that
sees more keys than the top-k, the two select different keys and compute different logprobs. This bench measures
it on samples a checkpoint's stage trained on (its rollout record: the sequences a trainer really saw):

- queries past the top-k, and those with a tie at the k-th score (another key scoring the same is left out);
- tokens of sequences past the top-k whose logprob differs by more than 1e-3 between the two, and the largest gap;
- the same between our trainer and plain transformers on sequences no longer than the top-k (selection is every
  key on both sides: the gap there is float rounding alone).

    .venv/bin/python bench/topk_agreement.py --store S [--checkpoint distill:latest --samples 200 --out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

# Run as a script (`python bench/topk_agreement.py`), its folder is on sys.path, not the repository's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rounds import machine  # noqa: E402
from infra.references import resolve_checkpoint  # noqa: E402
from infra.rollouts import recorded_shards  # noqa: E402
from infra.store import open_artifact, open_store  # noqa: E402
from model.dsa import install_dsa_indexers, key_scores, set_dense_attention  # noqa: E402
from model.dsa_gather import allowed_keys  # noqa: E402
from model.logprobs import next_token_logprobs  # noqa: E402
from model.presets import load_model  # noqa: E402

GAP = 1e-3


def sequences(checkpoint: str, samples: int) -> list[list[int]]:
    """Prompt + response ids of the first `samples` rows the checkpoint's stage recorded."""
    rows = []
    for shard in recorded_shards(open_artifact(checkpoint)):
        rows += [row["prompt_ids"] + row["response_ids"] for row in shard.table().to_pylist()]
        if len(rows) >= samples:
            break
    return rows[:samples]


@torch.no_grad()
def ties_at_kth(model, ids: torch.Tensor, topk: int) -> tuple[int, int]:
    """(queries seeing more than `topk` keys, those of them with a key left out that scores as the k-th) over the
    model's indexer layers, from each indexer's scores of every key, recomputed from its inputs in `model`'s forward."""
    indexers = install_dsa_indexers(model)
    inputs: dict[int, tuple] = {}
    handles = [indexer.register_forward_pre_hook(lambda module, args, index=index: inputs.__setitem__(index, args))
               for index, indexer in enumerate(indexers)]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    past = tied = 0
    for index, indexer in enumerate(indexers):
        hidden, q_resid, embeddings, mask = inputs[index][:4]
        q, k, weights = indexer.index_inputs(hidden, q_resid, embeddings, None)
        scores = key_scores(q, k, weights, allowed_keys(mask), indexer.softmax_scale)[0]  # [queries, keys]
        rows = scores[torch.isfinite(scores).sum(dim=-1) > topk]
        kth = rows.topk(topk, dim=-1).values[:, -1:]
        past += rows.shape[0]
        tied += int(((rows >= kth).sum(dim=-1) > topk).sum())
    return past, tied


@torch.no_grad()
def measure(checkpoint_dir: Path, rows: list[list[int]]) -> dict:
    ours = load_model(checkpoint_dir).eval()
    set_dense_attention(ours, False)  # the trainer's and engine's sparse attention, tie-stable top-k
    plain = load_model(checkpoint_dir).eval()  # transformers' own: its indexer and torch.topk, SDPA
    topk = ours.config.index_topk
    figures = {"past": {"sequences": 0, "tokens": 0, "differing": 0, "largest_gap": 0.0},
               "within": {"sequences": 0, "tokens": 0, "differing": 0, "largest_gap": 0.0},
               "queries_past_topk": 0, "queries_tied_at_kth": 0}
    for row in rows:
        ids = torch.tensor([row])
        gap = (next_token_logprobs(ours(ids).logits, ids) - next_token_logprobs(plain(ids).logits, ids)).abs()[0]
        part = figures["past" if len(row) > topk else "within"]
        part["sequences"] += 1
        part["tokens"] += gap.numel()
        part["differing"] += int((gap > GAP).sum())
        part["largest_gap"] = max(part["largest_gap"], float(gap.max()))
        if len(row) > topk:
            past, tied = ties_at_kth(ours, ids, topk)
            figures["queries_past_topk"] += past
            figures["queries_tied_at_kth"] += tied
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="artifacts")
    parser.add_argument("--checkpoint", default="distill:latest")
    parser.add_argument("--samples", type=int, default=200, help="recorded samples read, in record order")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    host = machine()
    checkpoint = resolve_checkpoint(open_store(args.store), args.checkpoint, "--checkpoint")
    rows = sequences(checkpoint, args.samples)
    if not rows:
        raise SystemExit(f"{checkpoint}: its stage recorded no samples (SFT and the ORM record none)")
    with tempfile.TemporaryDirectory(prefix="topk-agreement-") as tmp:
        local = Path(open_artifact(checkpoint).download(Path(tmp) / "checkpoint", skip=("deepspeed/",)))
        figures = measure(local, rows)
    document = json.dumps({"bench": "topk_agreement", "checkpoint": checkpoint, "samples": len(rows),
                           "gap_threshold": GAP, "machine": host, **figures}, indent=2)
    print(document)
    if args.out:
        args.out.write_text(document + "\n")


if __name__ == "__main__":
    main()
