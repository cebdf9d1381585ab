"""The `posttrain` command line."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(help="GLM-5-style post-training pipeline.", no_args_is_help=True, add_completion=False)
console = Console()


class LineageFormat(str, Enum):
    tree = "tree"
    json = "json"
    mermaid = "mermaid"


@app.command()
def lineage(
    uri: str = typer.Argument(..., help="Artifact URI (file://…, s3://…) or a name inside the default store."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole ancestry as JSON instead of a tree."),
    verify: bool = typer.Option(
        False, "--verify",
        help="Re-hash every file of the artifact, its ancestors and data inputs; exit 1 naming each file that differs.",
    ),
    output_format: LineageFormat = typer.Option(LineageFormat.tree, "--format", help="tree, json or mermaid."),
) -> None:
    """Show the ancestry of a checkpoint: parents, teachers, data inputs, code, config and reward modules."""
    from infra.lineage import ancestry_json, ancestry_mermaid, load_ancestry, verify_ancestry
    from infra.store import open_artifact, open_store

    resolved = uri if "://" in uri else open_store().open(uri).uri
    root = load_ancestry(resolved, open_artifact)
    if as_json or output_format is LineageFormat.json:
        typer.echo(json.dumps(ancestry_json(root), indent=2))
    elif output_format is LineageFormat.mermaid:
        typer.echo(ancestry_mermaid(root), nl=False)
    else:
        from posttrain.lineage_view import ancestry_tree

        console.print(ancestry_tree(root))
    if verify:
        problems = verify_ancestry(root)
        for problem in problems:
            typer.echo(f"MISMATCH {problem}", err=True)
        count = len({node.uri for node in root.walk()})
        if problems:
            typer.echo(f"verify: {len(problems)} problem(s) in {count} artifact(s)", err=True)
            raise typer.Exit(1)
        typer.echo(f"verify: all files of {count} artifact(s) match their digests", err=True)


@app.command()
def demo(
    store: str = typer.Option(None, help="Artifact store root (default $POSTTRAIN_STORE or ./artifacts)."),
    out: Path = typer.Option(Path("runs/demo"), help="Where the demo writes its report."),
    seed: int = typer.Option(0, help="Seed for data, tokenizer corpus and model initialisation."),
) -> None:
    """Run the pipeline on the embedded default: suites → tokenizer → glm5-tiny → store round-trip."""
    from posttrain.demo import run_demo

    summary = run_demo(store_root=store, out_dir=out, seed=seed, console=console)
    if not summary["ok"]:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
