"""`posttrain spec check FILE` and `posttrain spec schema`: a pipeline spec looked at before it runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from posttrain.store_option import store_option

spec_app = typer.Typer(help="Pipeline specs: check one and print its plan, or print their JSON Schema.",
                       no_args_is_help=True)


@spec_app.command("check")
def check(
    path: Path = typer.Argument(..., help="The spec's YAML or JSON file."),
    store: str = store_option("Resolve references in this store instead of the spec's."),
) -> None:
    """Validate the spec, resolve every reference, read every file it imports, and print the plan
    (stages to run or skip, with their inputs) without running anything. Exit 1 naming each problem."""
    from flows.spec import SpecError, load_spec
    from flows.spec_plan import plan_spec

    try:
        spec, base = load_spec(path)
    except SpecError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    if store is not None:  # checked as the option was read (store_option)
        spec = spec.model_copy(update={"store": store})
    plan = plan_spec(spec, base)
    console = Console()
    console.print(f"[bold]{path}[/bold]  seed {spec.seed}, store {spec.store or 'default'}")
    console.print(f"model: {plan.model}")
    for line in plan.data:
        console.print(f"data  {line}")
    table = Table("stage", "", "starts from", "inputs")
    for stage in plan.stages:
        table.add_row(stage.stage, "run" if stage.runs else "skip (not in the spec)", stage.starts_from,
                      "\n".join(stage.inputs))
    console.print(table)
    for problem in plan.problems:
        typer.echo(f"error: {path}: {problem}", err=True)
    if plan.problems:
        raise typer.Exit(1)
    typer.echo("spec ok")


@spec_app.command("schema")
def schema() -> None:
    """Print the spec's JSON Schema (for editors and validators)."""
    from flows.spec import spec_schema

    typer.echo(json.dumps(spec_schema(), indent=2))
