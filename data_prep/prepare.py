"""Stage 0: the embedded suites as chat@1 datasets, a tokenizer trained on them, an initial checkpoint.

Every artifact is named by the digest of what defines it, and commits are idempotent, so preparing
twice with the same settings commits nothing new and returns the same URIs.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from data_contracts import CHAT_V1, PREFERENCE_V1, PROMPT_V1, read_parquet, write_parquet
from data_contracts.conversation import messages_from_records
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from infra.publish import content_digest, data_input, parent_ref, publish_directory
from infra.store import ArtifactStore, CommittedArtifact
from model.checks import check_model_dir
from model.presets import build_model
from model.tokenizer import build_tokenizer_dir, load_tokenizer
from suites.prepare import SuiteSizes, preference_splits, prompt_splits, suite_splits


@dataclass(frozen=True)
class Prepared:
    datasets: dict[str, CommittedArtifact]  # suite → dataset
    rows: dict[str, int]
    tokenizer: CommittedArtifact
    init_checkpoint: CommittedArtifact
    parameters: int


def _lineage(kind: str, name: str, config: dict, seed: int, triggered_by: str, **links) -> Lineage:
    return Lineage(
        kind=kind, name=name, config=config, config_sha256=config_digest(config), seed=seed,
        code=current_code_version(), libraries=library_versions(), triggered_by=triggered_by, **links,
    )


def publish_suite(store, suite: str, sizes: SuiteSizes, seed: int, workdir: Path, triggered_by: str):
    """The suite's conversations (chat@1), what SFT trains on and evaluation asks."""
    return _publish_splits(store, suite, suite, CHAT_V1, suite_splits(suite, sizes, seed), sizes, seed, workdir,
                           triggered_by)


def publish_prompts(store, suite: str, sizes: SuiteSizes, seed: int, workdir: Path, triggered_by: str):
    """The suite's RL prompts (prompt@1) with their references and rule metadata, what general RL reads."""
    return _publish_splits(store, suite, f"{suite}-prompts", PROMPT_V1, prompt_splits(suite, sizes, seed), sizes, seed,
                           workdir, triggered_by)


def publish_preferences(store, suite: str, sizes: SuiteSizes, seed: int, workdir: Path, triggered_by: str):
    """The suite's (chosen, rejected) reply pairs (preference@1), what the ORM trains on."""
    return _publish_splits(store, suite, f"{suite}-preference", PREFERENCE_V1, preference_splits(suite, sizes, seed),
                           sizes, seed, workdir, triggered_by)


def _publish_splits(store, suite: str, label: str, contract, splits: dict[str, list[dict]], sizes: SuiteSizes,
                    seed: int, workdir: Path, triggered_by: str):
    config = {"suite": suite, "train": sizes.train, "test": sizes.test, "contract": contract.id}
    local = workdir / f"dataset-{label}"
    local.mkdir()
    rows = sum(write_parquet(contract, records, local / f"{split}.parquet") for split, records in splits.items())
    # Named by content: a changed generator gets a new name instead of clashing with the old data.
    name = f"datasets/{label}-{content_digest(local)[:12]}"
    return publish_directory(store, name, local, _lineage("dataset", label, config, seed, triggered_by)), rows


def training_conversations(datasets: list[CommittedArtifact], workdir: Path):
    for dataset in datasets:
        local = dataset.download(workdir / f"read-{dataset.uri.rsplit('/', 1)[-1]}")
        for row in read_parquet(CHAT_V1, local / "train.parquet").to_pylist():
            tools = json.loads(row["tools_json"]) if row["tools_json"] else None
            yield messages_from_records(row["messages"]), tools


def prepare(store: ArtifactStore, *, suites: list[str], sizes: SuiteSizes | dict[str, SuiteSizes], preset: str,
            seed: int, triggered_by: str = "posttrain", corpus: tuple[CommittedArtifact, ...] = ()) -> Prepared:
    """`sizes` is one size for every suite, or one per suite. The tokenizer learns from the suites'
    conversations and those of `corpus` (a person's imported chat@1 datasets)."""
    with tempfile.TemporaryDirectory(prefix="posttrain-prepare-") as tmp:
        workdir = Path(tmp)
        size_of = sizes if isinstance(sizes, dict) else dict.fromkeys(suites, sizes)
        published = {suite: publish_suite(store, suite, size_of[suite], seed, workdir, triggered_by)
                      for suite in suites}
        datasets = {suite: artifact for suite, (artifact, _) in published.items()}

        sources = [*datasets.values(), *corpus]
        if not sources:
            raise ValueError("a model preset's tokenizer learns from chat data: publish a suite or import chat data")
        tokenizer_local = build_tokenizer_dir(workdir / "tokenizer", training_conversations(sources, workdir))
        tokenizer_config = {"kind": "byte-level-bpe", "sources": [d.digest for d in sources]}
        tokenizer_artifact = publish_directory(
            store, f"tokenizers/glm5-bpe-{content_digest(tokenizer_local)[:12]}", tokenizer_local,
            _lineage("tokenizer", "glm5-bpe", tokenizer_config, seed, triggered_by,
                     inputs=[*(data_input(d, rows, CHAT_V1.id) for d, rows in published.values()),
                             *(data_input(d, None, CHAT_V1.id) for d in corpus)]),
        )
        tokenizer = load_tokenizer(tokenizer_local)

        model = build_model(preset, tokenizer, seed=seed)
        checkpoint_local = workdir / "checkpoint"
        model.save_pretrained(checkpoint_local)
        tokenizer.save_pretrained(checkpoint_local)
        model_config = {"preset": preset, "config": model.config.to_diff_dict(),
                        "tokenizer": tokenizer_artifact.digest}
        checkpoint = publish_directory(
            store, f"checkpoints/init/{preset}-{content_digest(checkpoint_local)[:12]}",
            checkpoint_local,
            _lineage("checkpoint", f"{preset} init", model_config, seed, triggered_by,
                     parents=[parent_ref(tokenizer_artifact, "tokenizer")]),
        )
        parameters = sum(p.numel() for p in model.parameters())
    return Prepared(datasets, {s: rows for s, (_, rows) in published.items()}, tokenizer_artifact, checkpoint,
                    parameters)


def import_checkpoint(store: ArtifactStore, path: Path, seed: int, triggered_by: str = "posttrain") -> CommittedArtifact:
    """A person's local Hugging Face checkpoint, checked (model/checks.py: refused naming what is missing)
    and committed as an initial checkpoint, named by its content; its lineage records where it came from,
    its architecture and whether it has DSA's indexer."""
    checked = check_model_dir(path)
    digest = content_digest(path)
    label = re.sub(r"[^A-Za-z0-9._=+@-]", "-", path.resolve().name)
    config = {"source": path.resolve().name, "source_digest": digest, "architecture": checked.architecture,
              "dsa": checked.has_dsa}
    return publish_directory(store, f"checkpoints/init/{label}-{digest[:12]}", path,
                             _lineage("checkpoint", f"{label} init", config, seed, triggered_by))
