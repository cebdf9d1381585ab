"""Evaluating a committed checkpoint: the eval@1 artifact and what it counts."""

from dataclasses import asdict

from data_contracts import EVAL_V1, read_parquet
from infra.store import open_store
from stages.evaluation.committed import evaluate_checkpoint
from stages.evaluation.settings import EvalSettings


def test_search_episodes_are_capped_apart_from_the_other_suites(small_store, tmp_path):
    store = open_store(small_store["root"])
    datasets = {uri.rsplit("/", 1)[-1].split("-")[0]: uri for uri in small_store["datasets"]}
    settings = EvalSettings(limit_per_suite=4, search_episodes=2, batch_size=4, max_new_tokens=4, max_turns=1)
    results = evaluate_checkpoint(store, small_store["init"], datasets, settings, ("sparse", "dense"))
    assert set(results) == {"sparse", "dense"}

    # This checkpoint's evaluation with exactly these settings (other tests evaluate it on this store too).
    [name] = [n for n in store.list_committed("evals/") if store.open(n).lineage()["config"].get("settings") == asdict(settings)]
    rows = read_parquet(EVAL_V1, store.open(name).download(tmp_path / "eval") / "metrics.parquet").to_pylist()
    counts = {(row["suite"], row["metric"]): row["n"] for row in rows}
    assert counts[("arith", "accuracy@sparse")] == 4
    assert counts[("search", "success@sparse")] == counts[("search", "success@dense")] == 2
    # Evaluated before with exactly these inputs: read back, not recomputed.
    assert evaluate_checkpoint(store, small_store["init"], datasets, settings, ("sparse", "dense")) == results
