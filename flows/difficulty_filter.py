"""A stage's `difficulty_filter` in the pipeline: each of its datasets filtered, as a task of the run right before
the stage, by the pass rates of the checkpoint the stage starts from (data_prep/difficulty_filter.py). The stage
then reads the filtered datasets, so its checkpoint's lineage lists them as inputs, and theirs names the source
dataset and that checkpoint. A re-run with nothing changed finds each filtered dataset committed and samples
nothing."""

from __future__ import annotations

from prefect import task

from data_prep.difficulty_filter import filter_by_difficulty, summary_lines
from data_prep.difficulty_settings import DifficultyFilterSettings
from flows.spec import PipelineSpec
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from stages.common.config import SamplingSettings


@task
def filter_dataset(store_root: str | None, dataset: str, checkpoint: str, settings: DifficultyFilterSettings,
                   sampling: SamplingSettings, engines: EngineSettings, seed: int, stage: str) -> str:
    """The filtered dataset's URI; its summary (rows kept, prompts at each pass rate) goes to the run's log."""
    def progress(done: int, total: int) -> None:
        print(f"{stage}: difficulty filter: answered {done}/{total} prompts of {dataset}" if done else
              f"{stage}: difficulty filter: engine ready; answering {total} prompts of {dataset}")

    filtered = filter_by_difficulty(open_store(store_root), dataset, checkpoint, settings, sampling=sampling,
                                    seed=seed, engines=engines, triggered_by=f"posttrain pipeline ({stage})",
                                    progress=progress)
    for line in summary_lines(filtered):
        print(f"{stage}: difficulty filter: {line}")
    return filtered.dataset.uri


def filtered_datasets(spec: PipelineSpec, stage: str, datasets: list[str], checkpoint: str) -> list[str]:
    """`datasets` filtered as the stage's section's `difficulty_filter` asks, with `checkpoint`, in the same order
    (the first is the one the stage's evaluation reads the test split of)."""
    section = getattr(spec.stages, stage)
    return [filter_dataset(spec.store, dataset, checkpoint, section.difficulty_filter, section.sampling,
                           section.engines, spec.seed, stage) for dataset in datasets]
