"""`posttrain rewards list` and `posttrain rewards check PATH`: what a researcher can plug in, and whether it fits."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

rewards_app = typer.Typer(help="Reward modules: list what is available, check one against the contract.",
                          no_args_is_help=True)
console = Console()


@rewards_app.command("list")
def list_modules() -> None:
    """Reward modules in posttrain's `rewards` package and those installed packages offer (entry points)."""
    from rewards.catalog import builtin_modules, installed_modules

    table = Table()
    table.add_column("dotted path", no_wrap=True)  # copied into configs whole
    table.add_column("from")
    table.add_column("what it scores")
    for module in builtin_modules() + installed_modules():
        table.add_row(module.path, module.origin, module.summary)
    console.print(table)


@rewards_app.command("check")
def check(
    path: str = typer.Argument(..., help="Dotted path of the module: package.module.Name or package.module:Name."),
    params: str = typer.Option("{}", help="JSON object of constructor parameters, as a stage config gives them."),
    timeout_s: float = typer.Option(30.0, help="Longest a call on the fixture batch may take."),
    start_up_s: float = typer.Option(60.0, help="Time the module may take to import and build before its first call."),
) -> None:
    """Run a module through the reward contract on a fixture batch, in a child process; exit 1 naming every problem."""
    from rewards.isolated import check_contract_isolated

    try:
        parsed = json.loads(params)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"not JSON: {error}", param_hint="--params") from error
    if not isinstance(parsed, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--params")
    result = check_contract_isolated(path, parsed, timeout_s, start_up_s)
    if result.name is not None:
        console.print(f"{result.path}: name {result.name!r}, version {result.version!r}, "
                      f"source sha256 {result.source_sha256}")
    if result.scores:
        table = Table("fixture sample", "score")
        for label, score in zip(result.labels, result.scores, strict=True):
            table.add_row(label, "None (not scored)" if score is None else f"{score:g}")
        console.print(table)
    for problem in result.problems:
        console.print(f"[red]problem:[/red] {problem}")
    if not result.passed:
        raise typer.Exit(1)
    console.print("[green]passes the reward contract[/green]")
