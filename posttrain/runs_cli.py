"""`posttrain runs compare RUN RUN…`: stage runs side by side, their metrics before → after and what they set
differently."""

from __future__ import annotations

import json
import os

import typer
from rich.console import Console
from rich.table import Table

from posttrain.store_option import store_option

runs_app = typer.Typer(help="Stage runs: compare several side by side.", no_args_is_help=True)


@runs_app.command("compare")
def compare(
    checkpoints: list[str] = typer.Argument(..., help="Two or more stage checkpoints: STAGE:latest, names in the "
                                                      "store or URIs."),
    store: str = store_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON instead of tables."),
    publish: bool = typer.Option(False, "--publish", help="Also publish it to the Prefect server at PREFECT_API_URL "
                                                          "as the markdown artifact `runs-compare` (the UI's "
                                                          "Artifacts page)."),
) -> None:
    """Each run's held-out metrics before (its init checkpoint's evaluation with the same settings) and after,
    side by side, and the config fields in which the runs differ."""
    from infra.store import open_store
    from posttrain.run_comparison import before_after, compared_runs, comparison_markdown, differing_settings

    if publish and not os.environ.get("PREFECT_API_URL"):
        typer.echo("error: --publish needs PREFECT_API_URL, the API of the server `posttrain ui` started", err=True)
        raise typer.Exit(2)

    try:
        runs = compared_runs(open_store(store), checkpoints)
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    differing = differing_settings(runs)
    if publish:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(key="runs-compare", markdown=comparison_markdown(runs, differing),
                                 description="runs compared: " + ", ".join(run.run_id for run in runs))
    if as_json:
        shown = [{key: value for key, value in vars(run).items() if key != "settings"} for run in runs]
        typer.echo(json.dumps({"runs": shown, "differing": differing}, indent=2, default=str))
        return
    console = Console()
    metrics = Table(title="held-out metrics, before → after")
    metrics.add_column("metric")
    for run in runs:
        metrics.add_column(f"{run.run_id}\n{run.stage}, {run.created_at}")
    for name in sorted({name for run in runs for name in run.after}):
        metrics.add_row(name, *(before_after(run.before.get(name), run.after.get(name)) for run in runs))
    console.print(metrics)
    settings = Table(title="settings that differ")
    settings.add_column("field")
    for run in runs:
        settings.add_column(run.run_id)
    for key, values in differing.items():
        settings.add_row(key, *(json.dumps(value, default=str) for value in values))
    console.print(settings if differing else "every setting is the same")

