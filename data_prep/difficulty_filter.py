"""`posttrain data filter` and a stage's `difficulty_filter`: GLM-5's difficulty filter. A checkpoint answers
every prompt of a dataset's train split K times (data_prep/pass_rates.py); the prompts whose pass rate lies in
a band are committed as a new dataset of the source's contract, beside the source's test split unchanged
(held-out evaluation on the filtered dataset stays comparable with the source's).

The new dataset's lineage names the source dataset and the checkpoint as parents and records the settings;
its `pass_rates.parquet` gives every train row's passes, samples, pass rate and whether it was kept. It is
named by what decides it (source, checkpoint, settings, seed, code), so asking again finds it committed and
samples nothing. A failure (a bad row, an engine that dies, a band that keeps nothing) commits nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_contracts import read_parquet, write_parquet
from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions, source_digest
from data_prep.difficulty_settings import DifficultyFilterSettings
from data_prep.import_data import check_dataset_name, safe_label
from data_prep.pass_rates import PassCount, Progress, pass_counts
from infra.publish import parent_ref, publish_for_inputs
from infra.store import ArtifactStore, CommittedArtifact
from model.tokenizer import load_tokenizer
from rewards import load_reward_module, reward_module_refs
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from stages.common.config import SamplingSettings
from stages.common.prompts import parse_prompts, prompt_contract

PASS_RATES_FILE = "pass_rates.parquet"
PASS_RATES_SCHEMA = pa.schema([("id", pa.string()), ("passes", pa.int32()), ("samples", pa.int32()),
                               ("pass_rate", pa.float64()), ("kept", pa.bool_())])
# The code that decides which rows are kept: the prompts, the engine and model, the rewards and this filter.
FILTER_CODE = ("data_prep", "stages/common", "stages/grpo", "rewards", "rollout", "model", "suites")
WEIGHTS = (".safetensors", ".bin", ".pt")


class FilterFailed(ValueError):
    pass


@dataclass(frozen=True)
class Filtered:
    dataset: CommittedArtifact
    settings: DifficultyFilterSettings
    pass_rates: list[dict]  # the rows of pass_rates.parquet
    test_rows: int
    reused: bool  # committed by an earlier run of the same inputs: nothing was sampled

    @property
    def kept(self) -> int:
        return sum(row["kept"] for row in self.pass_rates)


def filter_by_difficulty(store: ArtifactStore, dataset_uri: str, checkpoint_uri: str,
                         settings: DifficultyFilterSettings, *, sampling: SamplingSettings = SamplingSettings(),
                         seed: int = 0, name: str | None = None, engines: EngineSettings = EngineSettings(),
                         triggered_by: str = "posttrain data filter", progress: Progress | None = None) -> Filtered:
    """The train rows of `dataset_uri` whose pass rate under `checkpoint_uri` lies in the settings' band, and its
    test split unchanged, committed as the dataset `name` (default: the source's name with `-filtered`)."""
    source, checkpoint = store.open(dataset_uri), store.open(checkpoint_uri)
    source_lineage = Lineage.model_validate(source.lineage())
    label = check_dataset_name(name) if name is not None else safe_label(f"{source_lineage.name}-filtered")
    reward = load_reward_module(settings.reward, settings.reward_params)
    rewards = reward_module_refs(settings.reward, reward, settings.reward_params)
    decided_by = {"source": source.digest, "checkpoint": checkpoint.digest,
                  "settings": settings.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json"),
                  "seed": seed, "rewards": [ref.source_sha256 for ref in rewards],
                  "code": source_digest(*FILTER_CODE)}
    artifact_name = f"datasets/{label}-{config_digest(decided_by)[:12]}"
    if store.is_committed(artifact_name):
        return committed_filter(store.open(artifact_name), settings)

    contract = prompt_contract(source)
    with tempfile.TemporaryDirectory(prefix="posttrain-filter-") as tmp:
        workdir = Path(tmp)
        source_dir = source.download(workdir / "source")
        rows = read_parquet(contract, source_dir / "train.parquet", source=f"{source.uri}/train.parquet").to_pylist()
        if not rows:
            raise FilterFailed(f"{source.uri}: its train split has no rows to filter")
        tokenizer = load_tokenizer(checkpoint.download(workdir / "tokenizer", skip=_weights(checkpoint)))
        prompts = parse_prompts(rows, contract, tokenizer)  # a chat@1 row without a stated answer is named here
        with ExitStack() as stack:  # the engine stops however this block ends
            client = launch_engines(stack, engines, checkpoint.uri, workdir, seed=seed)().client
            if progress is not None:
                progress(0, len(prompts))
            counts = pass_counts(client, tokenizer, prompts, reward, samples=settings.samples,
                                 threshold=settings.pass_threshold, sampling=sampling.params(), seed=seed,
                                 batch_prompts=settings.batch_prompts, progress=progress)
        pass_rates = [pass_rate_row(count, settings) for count in counts]
        if not any(row["kept"] for row in pass_rates):
            raise FilterFailed(f"no prompt's pass rate in {settings.band()}; pass rates seen: {seen_rates(pass_rates)} "
                               f"(of {len(pass_rates)} prompts, {settings.samples} answers each)")

        local = workdir / "dataset"
        local.mkdir()
        kept_ids = {row["id"] for row in pass_rates if row["kept"]}
        write_parquet(contract, [row for row in rows if row["id"] in kept_ids], local / "train.parquet")
        shutil.copyfile(source_dir / "test.parquet", local / "test.parquet")  # byte for byte: the same held-out rows
        pq.write_table(pa.Table.from_pylist(pass_rates, schema=PASS_RATES_SCHEMA), local / PASS_RATES_FILE)
        test_rows = pq.read_metadata(local / "test.parquet").num_rows
        config = {"contract": contract.id, "source": source.uri, "checkpoint": checkpoint.uri,
                  **settings.model_dump(mode="json"), "sampling": sampling.model_dump(mode="json"),
                  "train_rows": len(rows), "kept_rows": len(kept_ids), "test_rows": test_rows,
                  "code_digest": decided_by["code"]}
        lineage = Lineage(kind="dataset", name=label, config=config, config_sha256=config_digest(config), seed=seed,
                          parents=[parent_ref(source, "source"), parent_ref(checkpoint, "evaluated")],
                          reward_modules=rewards, code=current_code_version(), libraries=library_versions(),
                          triggered_by=triggered_by)
        dataset = publish_for_inputs(store, artifact_name, local, lineage)
    return Filtered(dataset, settings, pass_rates, test_rows, reused=False)


def pass_rate_row(count: PassCount, settings: DifficultyFilterSettings) -> dict:
    return {"id": count.id, "passes": count.passes, "samples": count.samples, "pass_rate": count.rate,
            "kept": settings.keeps(count.rate)}


def committed_filter(dataset: CommittedArtifact, settings: DifficultyFilterSettings) -> Filtered:
    """A filtered dataset an earlier run committed, read back: its pass rates and the size of its test split."""
    with tempfile.TemporaryDirectory(prefix="posttrain-filter-") as tmp:
        # Read from a file: with torch loaded (pyarrow 26, torch 2.13), a Parquet table read from memory made
        # the process abort at exit (std::terminate) in about half the runs here; read from a file it never did.
        path = Path(tmp) / PASS_RATES_FILE
        path.write_bytes(dataset.read_bytes(PASS_RATES_FILE))
        pass_rates = pq.read_table(path).to_pylist()
    return Filtered(dataset, settings, pass_rates, dataset.lineage()["config"]["test_rows"], reused=True)


def seen_rates(pass_rates: list[dict]) -> str:
    """"0 (12 prompts), 0.25 (3 prompts)": how many prompts had each pass rate."""
    counted = Counter(row["pass_rate"] for row in pass_rates)
    return ", ".join(f"{rate:g} ({count} prompt{'s' if count != 1 else ''})" for rate, count in sorted(counted.items()))


def summary_lines(filtered: Filtered) -> list[str]:
    """What a person reads after a filter: rows kept of all, the prompts at each pass rate, the new dataset."""
    settings, total = filtered.settings, len(filtered.pass_rates)
    lines = [f"kept {filtered.kept} of {total} train rows: pass rate in {settings.band()} over {settings.samples} "
             f"answers each ({settings.reward} >= {settings.pass_threshold:g}); test split unchanged "
             f"({filtered.test_rows} rows)" + (" [committed earlier, nothing sampled]" if filtered.reused else "")]
    by_passes = Counter(row["passes"] for row in filtered.pass_rates)
    widest = max(by_passes.values())
    for passes in range(settings.samples + 1):
        if passes not in by_passes:
            continue
        count = by_passes[passes]
        bar = "#" * max(1, 30 * count // widest)
        kept = "kept" if settings.keeps(passes / settings.samples) else "dropped"
        lines.append(f"  {passes:>3}/{settings.samples} passed  {count:>6} prompts  {bar:<30}  {kept}")
    lines.append(filtered.dataset.uri)
    return lines


def _weights(checkpoint: CommittedArtifact) -> tuple[str, ...]:
    """What reading a checkpoint's tokenizer can leave behind: its weights and resume state (the engine loads
    the weights itself)."""
    return ("deepspeed/", *(path for path in checkpoint.manifest.files if path.endswith(WEIGHTS)))
