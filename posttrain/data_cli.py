"""`posttrain data import`: a person's own data, as a committed dataset the stages read; `posttrain data filter`:
a dataset's prompts kept by how often a checkpoint answers them right."""

from __future__ import annotations

import json
from enum import StrEnum
from functools import partial
from pathlib import Path

import typer

from data_prep.difficulty_settings import DEFAULT_REWARD
from posttrain.store_option import store_option

data_app = typer.Typer(help="Bring your own data into the store, or filter a dataset by difficulty.",
                       no_args_is_help=True)


class DatasetKind(StrEnum):
    chat = "chat"
    prompt = "prompt"
    preference = "preference"
    harbor = "harbor"


@data_app.command("import")
def import_command(
    path: Path = typer.Argument(..., help="A JSONL or Parquet file, a Hugging Face `datasets` folder (save_to_disk), "
                                          "or (--as harbor) a folder of Harbor task folders."),
    kind: DatasetKind = typer.Option(..., "--as", help="chat (SFT conversations), prompt (RL prompts), preference "
                                                       "(chosen/rejected pairs) or harbor (Harbor tasks as rows of "
                                                       "the `terminal` agent task, each verified in the sandbox)."),
    name: str = typer.Option(None, help="The dataset's name in the store (default: the file's name)."),
    test_fraction: float = typer.Option(0.1, help="Share of rows in the test split (chosen by id: deterministic)."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows",
                                       help="Commit the good rows; write the rejects, with their reasons, beside the source."),
    store: str = store_option(),
    seed: int = typer.Option(0, help="Seeds the split."),
) -> None:
    """Import OpenAI `messages`, ShareGPT `conversations`, `prompt`/`completion` or `prompt`/`chosen`/`rejected`
    rows, or Harbor tasks; a bad row (a refused task) is named (file, line or row, field; the task and the reason) and
    nothing is committed unless --skip-bad-rows."""
    from data_prep.harbor_import import import_harbor
    from data_prep.import_data import ImportFailed, import_dataset
    from infra.store import open_store
    from rollout.agents.envs.code_sandbox import SandboxUnavailable

    importer = import_harbor if kind is DatasetKind.harbor else partial(import_dataset, kind=kind.value)
    try:
        imported = importer(open_store(store), path, name=name, test_fraction=test_fraction,
                            skip_bad_rows=skip_bad_rows, seed=seed)
    except (ImportFailed, ValueError, OSError, SandboxUnavailable) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"{imported.dataset.uri}  (train {imported.rows['train']}, test {imported.rows['test']} rows)")
    if imported.rejected and kind is DatasetKind.harbor:  # a few tasks, each refusal worth a line
        for problem in imported.problems:
            typer.echo(f"refused {problem}", err=True)
        tasks = "task" if imported.rejected == 1 else "tasks"
        typer.echo(f"{imported.rejected} {tasks} refused; they and their reasons are in {imported.rejects_file}", err=True)
    elif imported.rejected:
        typer.echo(f"{imported.rejected} bad rows skipped; they and their reasons are in {imported.rejects_file}", err=True)


@data_app.command("filter")
def filter_command(
    dataset: str = typer.Argument(..., help="The dataset whose train prompts are filtered: NAME:latest, a name "
                                            "inside the store, or a URI (chat@1 rows that state an answer, or "
                                            "prompt@1 rows)."),
    checkpoint: str = typer.Option(..., "--checkpoint", help="The model that answers them: STAGE:latest, a name "
                                                             "inside the store, or a URI."),
    samples: int = typer.Option(..., "--samples", min=1, help="K: answers sampled per prompt."),
    pass_rate: str = typer.Option(..., "--pass-rate", help="LOW..HIGH: keep the prompts whose share of passing "
                                                           "answers lies in this band, both ends included (0.1..0.9: "
                                                           "neither always nor never solved)."),
    reward: str = typer.Option(DEFAULT_REWARD, "--reward", help="The reward module that scores each answer, by "
                                                                "dotted path."),
    reward_params: str = typer.Option(None, "--reward-params", help="Its parameters, as a JSON object."),
    pass_threshold: float = typer.Option(1.0, "--pass-threshold", help="An answer passes when its reward is at "
                                                                        "least this."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens per answer at most."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature."),
    name: str = typer.Option(None, "--name", help="The new dataset's name in the store (default: the source's "
                                                  "name with -filtered)."),
    store: str = store_option(),
    seed: int = typer.Option(0, "--seed", help="Seeds the engine and every request's sampling."),
) -> None:
    """Keep the prompts a checkpoint sometimes fails (GLM-5's difficulty filter), as a new dataset.

    The checkpoint answers every prompt of the dataset's train split K times on a rollout engine; the train rows
    whose pass rate lies in LOW..HIGH are committed as a new dataset of the same contract, with the source's test
    split unchanged, so held-out evaluation on it stays comparable with the source's. Its lineage names the source
    dataset and the checkpoint, and its pass_rates.parquet gives every train row's passes and whether it was kept.
    A bad option, a missing dataset or checkpoint, a row without a reference answer or a band that keeps nothing
    is named, exits 2 and commits nothing."""
    from pydantic import ValidationError

    from data_prep.difficulty_filter import FilterFailed, filter_by_difficulty, summary_lines
    from data_prep.difficulty_settings import DifficultyFilterSettings
    from data_prep.pass_rates import UnscorablePrompt
    from infra.references import UnresolvedReference, resolve_checkpoint, resolve_dataset
    from infra.scratch import private_temp
    from infra.store import open_store
    from rewards import RewardModuleError
    from stages.common.config import SamplingSettings

    def fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    try:
        params = json.loads(reward_params) if reward_params else {}
        settings = DifficultyFilterSettings(samples=samples, pass_rate=pass_rate, reward=reward, reward_params=params,
                                            pass_threshold=pass_threshold)
        sampling = SamplingSettings(temperature=temperature, max_new_tokens=max_new_tokens)
    except json.JSONDecodeError as error:
        raise fail(f"--reward-params: not a JSON object ({error})") from error
    except ValidationError as error:
        raise fail("; ".join(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg'].removeprefix('Value error, ')}"
                             for e in error.errors())) from error
    try:
        artifacts = open_store(store)
        dataset_uri = resolve_dataset(artifacts, dataset, "DATASET")
        checkpoint_uri = resolve_checkpoint(artifacts, checkpoint, "--checkpoint")
        with private_temp():  # the downloads and the engine's scratch go with the command, however it ends
            filtered = filter_by_difficulty(artifacts, dataset_uri, checkpoint_uri, settings, sampling=sampling,
                                            seed=seed, name=name, progress=_progress_line)
    except (UnresolvedReference, RewardModuleError) as error:
        raise fail(str(error)) from error
    except (FilterFailed, UnscorablePrompt, ValueError) as error:  # a row without a reference answer: ValueError
        raise fail(f"{dataset}: {error}") from error
    for line in summary_lines(filtered):
        typer.echo(line)


def _progress_line(done: int, total: int) -> None:
    """A line per batch on stderr: a log keeps it, and it says how far a long run is."""
    typer.echo(f"answered {done}/{total} prompts" if done else f"engine ready; answering {total} prompts", err=True)
