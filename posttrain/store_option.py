"""The `--store` option every command that reads or writes the artifact store takes, with one meaning."""

from __future__ import annotations

import typer

from infra.store import check_store_root


def store_option(help_text: str = "Artifact store root (a folder, file://… or s3://bucket/prefix); default "
                                  "$POSTTRAIN_STORE or ./artifacts.") -> typer.models.OptionInfo:
    return typer.Option(None, "--store", help=help_text, callback=_checked)


def _checked(root: str | None) -> str | None:
    """A root that cannot be a store is refused in one line before the command starts anything."""
    if root is None:
        return None
    try:
        return check_store_root(root)
    except ValueError as error:
        typer.echo(f"error: --store: {error}", err=True)
        raise typer.Exit(2) from None
