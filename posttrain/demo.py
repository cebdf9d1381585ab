"""`make demo`: the pipeline on the embedded default, as far as it exists.

Publishes the embedded suites as `chat@1` datasets, trains the tokenizer on the committed training
splits, builds a glm5-tiny checkpoint from it, then reads the checkpoint back from the store, checks
its logits, and verifies the whole lineage byte for byte. Every artifact goes through the commit
protocol, so re-running with nothing changed commits nothing new.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from data_contracts import CHAT_V1, read_parquet, write_parquet
from data_contracts.conversation import messages_from_records
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from infra.lineage import load_ancestry, verify_ancestry
from infra.publish import data_input, parent_ref, publish_directory
from infra.store import CommittedArtifact, open_artifact, open_store
from model.presets import build_model, load_model, parameter_count
from model.tokenizer import build_tokenizer_dir, load_tokenizer
from suites.prepare import SUITES, SuiteSizes, suite_splits

MODEL_PRESET = "glm5-tiny"


def _lineage(kind: str, name: str, config: dict, seed: int, **links) -> Lineage:
    return Lineage(
        kind=kind, name=name, config=config, config_sha256=config_digest(config), seed=seed,
        code=current_code_version(), libraries=library_versions(), triggered_by="posttrain demo", **links,
    )


def publish_suite(store, suite: str, sizes: SuiteSizes, seed: int, workdir: Path) -> tuple[CommittedArtifact, int]:
    config = {"suite": suite, "train": sizes.train, "test": sizes.test, "contract": CHAT_V1.id}
    local = workdir / f"dataset-{suite}"
    local.mkdir()
    rows = 0
    for split, records in suite_splits(suite, sizes, seed).items():
        rows += write_parquet(CHAT_V1, records, local / f"{split}.parquet")
    name = f"datasets/{suite}-{config_digest({**config, 'seed': seed})[:12]}"
    return publish_directory(store, name, local, _lineage("dataset", suite, config, seed)), rows


def training_conversations(datasets: list[CommittedArtifact], workdir: Path):
    for dataset in datasets:
        local = dataset.download(workdir / f"read-{dataset.uri.rsplit('/', 1)[-1]}")
        for row in read_parquet(CHAT_V1, local / "train.parquet").to_pylist():
            tools = json.loads(row["tools_json"]) if row["tools_json"] else None
            yield messages_from_records(row["messages"]), tools


def run_demo(store_root: str | None, out_dir: Path, seed: int, console: Console) -> dict:
    started = time.monotonic()
    store = open_store(store_root)
    sizes = SuiteSizes()
    with tempfile.TemporaryDirectory(prefix="posttrain-demo-") as tmp:
        workdir = Path(tmp)
        with console.status("publishing the embedded suites as chat@1 datasets"):
            published = [publish_suite(store, suite, sizes, seed, workdir) for suite in SUITES]
        datasets = [artifact for artifact, _ in published]

        with console.status("training the tokenizer on the committed training splits"):
            tokenizer_local = build_tokenizer_dir(workdir / "tokenizer", training_conversations(datasets, workdir))
            tokenizer_config = {"kind": "byte-level-bpe", "sources": [d.digest for d in datasets]}
            tokenizer_artifact = publish_directory(
                store, f"tokenizers/glm5-bpe-{config_digest(tokenizer_config)[:12]}", tokenizer_local,
                _lineage("tokenizer", "glm5-bpe", tokenizer_config, seed,
                         inputs=[data_input(d, rows, CHAT_V1.id) for d, rows in published]),
            )
            tokenizer = load_tokenizer(tokenizer_local)

        with console.status(f"building the {MODEL_PRESET} initial checkpoint"):
            model = build_model(MODEL_PRESET, tokenizer, seed=seed).eval()
            checkpoint_local = workdir / "checkpoint"
            model.save_pretrained(checkpoint_local)
            tokenizer.save_pretrained(checkpoint_local)
            model_config = {"preset": MODEL_PRESET, "config": model.config.to_diff_dict()}
            checkpoint = publish_directory(
                store, f"checkpoints/init/{MODEL_PRESET}-{config_digest({**model_config, 'seed': seed})[:12]}",
                checkpoint_local,
                _lineage("checkpoint", f"{MODEL_PRESET} init", model_config, seed,
                         parents=[parent_ref(tokenizer_artifact, "tokenizer")]),
            )

        with console.status("reading the checkpoint back from the store and verifying its lineage"):
            restored = load_model(checkpoint.download(workdir / "restored")).eval()
            probe = torch.randint(0, len(tokenizer), (2, 160), generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                logits_match = torch.equal(model(probe).logits, restored(probe).logits)
            problems = verify_ancestry(load_ancestry(checkpoint.uri, open_artifact))

    summary = {
        "ok": logits_match and not problems,
        "store": store.root_uri,
        "datasets": {d.uri: rows for d, rows in published},
        "tokenizer": {"uri": tokenizer_artifact.uri, "vocab": len(tokenizer)},
        "checkpoint": {"uri": checkpoint.uri, "digest": checkpoint.digest, "parameters": parameter_count(model)},
        "round_trip_logits_identical": logits_match,
        "lineage_problems": problems,
        "seconds": round(time.monotonic() - started, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _print_report(console, summary, out_dir)
    return summary


def _print_report(console: Console, summary: dict, out_dir: Path) -> None:
    table = Table(title="posttrain demo", show_lines=False)
    table.add_column("step")
    table.add_column("result")
    for uri, rows in summary["datasets"].items():
        table.add_row("dataset", f"{uri}  ({rows} rows)")
    table.add_row("tokenizer", f"{summary['tokenizer']['uri']}  (vocab {summary['tokenizer']['vocab']})")
    checkpoint = summary["checkpoint"]
    table.add_row("checkpoint", f"{checkpoint['uri']}  ({checkpoint['parameters']:,} parameters)")
    table.add_row("store round-trip", "identical logits" if summary["round_trip_logits_identical"] else "MISMATCH")
    table.add_row("lineage --verify", "all bytes match" if not summary["lineage_problems"] else
                  "; ".join(summary["lineage_problems"]))
    table.add_row("report", str(out_dir / "summary.json"))
    console.print(table)
    console.print(f"trace it: posttrain lineage {checkpoint['uri']} --verify")
