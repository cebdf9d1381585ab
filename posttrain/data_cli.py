"""`posttrain data import`: a person's own data, as a committed dataset the stages read."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

data_app = typer.Typer(help="Bring your own data into the store.", no_args_is_help=True)


class DatasetKind(StrEnum):
    chat = "chat"
    prompt = "prompt"
    preference = "preference"


@data_app.command("import")
def import_command(
    path: Path = typer.Argument(..., help="A JSONL or Parquet file, or a Hugging Face `datasets` folder (save_to_disk)."),
    kind: DatasetKind = typer.Option(..., "--as", help="chat (SFT conversations), prompt (RL prompts) or preference "
                                                       "(chosen/rejected pairs)."),
    name: str = typer.Option(None, help="The dataset's name in the store (default: the file's name)."),
    test_fraction: float = typer.Option(0.1, help="Share of rows in the test split (chosen by id: deterministic)."),
    skip_bad_rows: bool = typer.Option(False, "--skip-bad-rows",
                                       help="Commit the good rows; write the rejects, with their reasons, beside the source."),
    store: str = typer.Option(None, help="Artifact store root; default $POSTTRAIN_STORE or ./artifacts."),
    seed: int = typer.Option(0, help="Seeds the split."),
) -> None:
    """Import OpenAI `messages`, ShareGPT `conversations`, `prompt`/`completion` or `prompt`/`chosen`/`rejected`
    rows; a bad row is named (file, line or row, field) and nothing is committed unless --skip-bad-rows."""
    from data_prep.import_data import ImportFailed, import_dataset
    from infra.store import open_store

    try:
        imported = import_dataset(open_store(store), path, kind.value, name=name, test_fraction=test_fraction,
                                  skip_bad_rows=skip_bad_rows, seed=seed)
    except (ImportFailed, ValueError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"{imported.dataset.uri}  (train {imported.rows['train']}, test {imported.rows['test']} rows)")
    if imported.rejected:
        typer.echo(f"{imported.rejected} bad rows skipped; they and their reasons are in {imported.rejects_file}", err=True)
