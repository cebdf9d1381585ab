"""Evaluate a committed checkpoint on the held-out splits and commit the metrics as an eval@1 artifact.

Runs the same model twice when asked: with DSA sparse attention (how it is served) and dense, so a
report can show what sparsity costs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from data_contracts import EVAL_V1, write_parquet
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from infra.publish import data_input, parent_ref, publish_for_inputs, published_contract
from infra.store import ArtifactStore, CommittedArtifact
from model.device import inference_device
from model.dsa import install_dsa_indexers, set_dense_attention
from model.presets import load_model
from model.tokenizer import load_tokenizer
from stages.common.inputs import load_split
from stages.evaluation.chat_replies import evaluate_replies
from stages.evaluation.evaluate import SUITES as EVALUATED_SUITES
from stages.evaluation.evaluate import evaluate
from stages.evaluation.generation import greedy_generator
from stages.evaluation.report import eval_rows
from stages.evaluation.settings import EvalSettings
from suites.prepare import SUITES as EMBEDDED_SUITES


def evaluate_checkpoint(
    store: ArtifactStore, checkpoint_uri: str, dataset_uris: dict[str, str], settings: EvalSettings,
    attention: tuple[str, ...] = ("sparse",),
) -> dict[str, dict[str, float]]:
    """{attention: metrics} for the checkpoint, committed as `evals/<checkpoint>-<settings>`."""
    checkpoint = store.open(checkpoint_uri)
    # The embedded suites without an evaluator of their own (calc, instruct, chat) are measured by later
    # stages; every other dataset is a person's own chat data, asked its questions (chat_replies.py).
    datasets = {name: store.open(uri) for name, uri in dataset_uris.items()
                if name in EVALUATED_SUITES or name not in EMBEDDED_SUITES}
    config = {"settings": asdict(settings), "attention": list(attention), "checkpoint": checkpoint.digest,
              "datasets": {suite: d.digest for suite, d in datasets.items()}}

    def run(workdir: Path) -> tuple[dict[str, dict[str, float]], list[dict]]:
        local = checkpoint.download(workdir / "checkpoint")
        model, tokenizer = load_model(local).to(inference_device()).eval(), load_tokenizer(local)
        install_dsa_indexers(model)
        caps = {"search": settings.search_episodes}
        rows = {name: load_split([dataset], "test", workdir / name)[: caps.get(name)]
                for name, dataset in datasets.items()}
        suites = {name: suite_rows for name, suite_rows in rows.items() if name in EVALUATED_SUITES}
        results, all_rows = {}, []
        for mode in attention:
            set_dense_attention(model, dense=mode == "dense", score_keys=mode != "dense")
            results[mode] = {}
            if suites:
                report = evaluate(model, tokenizer, suites, seed=settings.seed, limit_per_suite=settings.limit_per_suite,
                                  batch_size=settings.batch_size, max_new_tokens=settings.max_new_tokens,
                                  max_turns=settings.max_turns)
                results[mode] |= report.metrics
                all_rows += [dict(row, metric=f"{row['metric']}@{mode}") for row in eval_rows(report, checkpoint.uri, "test")]
            generate = greedy_generator(model, tokenizer, settings.max_new_tokens)
            created_at = datetime.now(UTC).isoformat(timespec="seconds")
            for name in sorted(set(rows) - set(suites)):
                held_out = rows[name][: settings.limit_per_suite]
                metrics = evaluate_replies(held_out, generate, batch_size=settings.batch_size)
                results[mode] |= {f"{name}/{metric}": value for metric, value in metrics.items()}
                all_rows += [{"checkpoint_uri": checkpoint.uri, "suite": name, "metric": f"{metric}@{mode}",
                              "split": "test", "value": value, "n": len(held_out), "created_at": created_at}
                             for metric, value in metrics.items()]
        return results, all_rows

    return committed_eval(store, checkpoint, list(datasets.values()), config, settings.seed, run)


EvalRun = Callable[[Path], tuple[dict[str, dict[str, float]], list[dict]]]


def committed_eval(
    store: ArtifactStore, checkpoint: CommittedArtifact, datasets: list[CommittedArtifact], config: dict, seed: int,
    run: EvalRun,
) -> dict[str, dict[str, float]]:
    """Run an evaluation once per (checkpoint, config): `run(workdir)` gives {mode: metrics} and eval@1 rows,
    committed as `evals/<checkpoint>-<config digest>`; later calls read the committed record back."""
    name = f"evals/{checkpoint.uri.rsplit('/', 1)[-1]}-{config_digest(config)[:12]}"
    if store.is_committed(name):
        return _results_from_summary(Lineage.model_validate(store.open(name).lineage()).eval_summary, config)
    with tempfile.TemporaryDirectory(prefix="posttrain-eval-") as tmp:
        workdir = Path(tmp)
        results, rows = run(workdir)
        out = workdir / "eval"
        out.mkdir()
        write_parquet(EVAL_V1, rows, out / "metrics.parquet")
        lineage = Lineage(
            kind="eval", name=f"eval of {checkpoint.uri.rsplit('/', 1)[-1]}",
            parents=[parent_ref(checkpoint, "evaluated")], inputs=[data_input(d, None, published_contract(d)) for d in datasets],
            config=config, config_sha256=config_digest(config), code=current_code_version(),
            libraries=library_versions(), seed=seed, eval_summary={
                f"{name}@{mode}": value for mode, metrics in results.items() for name, value in metrics.items()
            },
        )
        committed = publish_for_inputs(store, name, out, lineage)
    return _results_from_summary(Lineage.model_validate(committed.lineage()).eval_summary, config)


def _results_from_summary(summary: dict[str, float], config: dict) -> dict[str, dict[str, float]]:
    # Every mode asked for, also one that had nothing to measure (a form left without datasets).
    results: dict[str, dict[str, float]] = {mode: {} for mode in config.get("attention", ())}
    for key, value in summary.items():
        name, _, mode = key.rpartition("@")
        results.setdefault(mode, {})[name] = value
    return results
