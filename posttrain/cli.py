"""The `posttrain` command line."""

from __future__ import annotations

import json
import logging
import os
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console

from flows.params import PipelineParams
from posttrain.data_cli import data_app
from posttrain.model_options import model_options
from posttrain.rewards_cli import rewards_app
from posttrain.runs_cli import runs_app
from posttrain.spec_cli import spec_app
from posttrain.store_option import store_option

# Every process the CLI starts (a temporary Prefect server, the UI's server, stage jobs, engines) inherits
# these: no analytics leave a training cluster unless its operator sets them otherwise.
for _name, _value in (("PREFECT_SERVER_ANALYTICS_ENABLED", "false"), ("DO_NOT_TRACK", "1")):
    os.environ.setdefault(_name, _value)

app = typer.Typer(help="GLM-5-style post-training pipeline.", no_args_is_help=True, add_completion=False)
app.add_typer(rewards_app, name="rewards")
app.add_typer(data_app, name="data")
app.add_typer(spec_app, name="spec")
app.add_typer(runs_app, name="runs")
console = Console()


class LineageFormat(StrEnum):
    tree = "tree"
    json = "json"
    mermaid = "mermaid"
    dot = "dot"


@app.command()
def lineage(
    uri: str = typer.Argument(..., help="Artifact URI (file://…, s3://…), a name inside the default store, or "
                                        "STAGE:latest (that stage's newest checkpoint)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole ancestry as JSON instead of a tree."),
    verify: bool = typer.Option(
        False, "--verify",
        help="Re-hash every file of the artifact, its ancestors and data inputs; exit 1 naming each file that differs.",
    ),
    output_format: LineageFormat = typer.Option(LineageFormat.tree, "--format", help="tree, json, mermaid or dot."),
    store: str = store_option("The store a name or STAGE:latest is looked up in (a URI names its own); default "
                              "$POSTTRAIN_STORE or ./artifacts."),
    debug: bool = typer.Option(False, "--debug", help="On an error, show the traceback as well."),
) -> None:
    """Show the ancestry of a checkpoint: parents, teachers, data inputs, the samples it trained on, code, config
    and reward modules. Ancestors are read inside the artifact's store only (a copied or moved store is verified
    where it is now); a reference to another store is named as a problem."""
    from infra.lineage import ancestry_dot, ancestry_json, ancestry_mermaid, load_ancestry, located, verify_ancestry
    from infra.store import open_store
    from infra.store.errors import ArtifactStoreError

    def ancestry(resolved: str):
        root = load_ancestry(*located(resolved, open_store(store)))
        if root.error:  # the artifact itself could not be read: nothing to show
            raise ArtifactStoreError(root.error)
        return root

    root = _opened(uri, store, debug, ancestry)
    if as_json or output_format is LineageFormat.json:
        typer.echo(json.dumps(ancestry_json(root), indent=2))
    elif output_format is LineageFormat.mermaid:
        typer.echo(ancestry_mermaid(root), nl=False)
    elif output_format is LineageFormat.dot:
        typer.echo(ancestry_dot(root), nl=False)
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


class RolloutsFormat(StrEnum):
    table = "table"
    jsonl = "jsonl"


@app.command()
def rollouts(
    uri: str = typer.Argument(..., help="A checkpoint of an RL or distillation stage: URI, name in the default store, "
                                        "or STAGE:latest."),
    step: int = typer.Option(None, "--step", help="Only this training step's samples."),
    limit: int = typer.Option(10, "--limit", min=1, help="At most this many samples."),
    output_format: RolloutsFormat = typer.Option(RolloutsFormat.table, "--format", help="table (for people) or jsonl "
                                                 "(every column, with the prompt and completion decoded)."),
    store: str = store_option("The store a name or STAGE:latest is looked up in (a URI names its own); default "
                              "$POSTTRAIN_STORE or ./artifacts."),
    debug: bool = typer.Option(False, "--debug", help="On an error, show the traceback as well."),
) -> None:
    """Show the samples a checkpoint's stage trained on, decoded, with their rewards and advantages."""
    from infra.store import open_artifact
    from posttrain.rollouts_view import decoded_samples, samples_table

    def samples_of(resolved: str):
        checkpoint = open_artifact(resolved)
        return checkpoint, decoded_samples(checkpoint, step, limit, for_reader=output_format is RolloutsFormat.table)

    checkpoint, samples = _opened(uri, store, debug, samples_of)
    if not samples:
        typer.echo(f"{checkpoint.uri}: no samples on record" + (f" at step {step}" if step is not None else ""), err=True)
        raise typer.Exit(1)
    if output_format is RolloutsFormat.jsonl:
        for sample in samples:
            typer.echo(json.dumps(sample))
    else:
        console.print(samples_table(samples))


def _opened(uri: str, store: str | None, debug: bool, open_resolved):
    """`open_resolved(resolved URI)` for a URI, a name in `store` (default the default store) or STAGE:latest; a bad name, a missing
    or uncommitted artifact, an unreachable or unauthorized store is one line and exit 2."""
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.references import LATEST, resolve_checkpoint
    from infra.store import open_store
    from infra.store.errors import ArtifactStoreError

    if not debug:  # an unreachable store is retried for seconds; the one line after says why it failed
        logging.getLogger("infra.store.retry").setLevel(logging.ERROR)
    try:
        if uri.endswith(LATEST) and "://" not in uri:  # STAGE:latest, the newest checkpoint of that stage
            resolved = resolve_checkpoint(open_store(store), uri, "URI")
        else:
            resolved = uri if "://" in uri else open_store(store).open(uri).uri
        return open_resolved(resolved)
    except (ArtifactStoreError, ValueError, OSError, BotoCoreError, ClientError) as error:
        if debug:
            raise
        typer.echo(f"error: {uri}: {error}" if uri not in str(error) else f"error: {error}", err=True)
        raise typer.Exit(2) from error


@app.command()
def prepare(
    store: str = store_option(),
    preset: str = typer.Option("glm5-tiny", help="Model preset of the initial checkpoint."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed for data, tokenizer corpus and model initialisation."),
    out: Path = typer.Option(None, help="Also write the URIs as JSON to this file."),
) -> None:
    """Stage 0 alone: publish the embedded suites, train the tokenizer, build the initial checkpoint."""
    from data_prep.prepare import prepare as prepare_stage
    from infra.store import open_store
    from suites.prepare import SUITES, SuiteSizes

    with console.status("publishing suites, training the tokenizer, building the initial checkpoint"):
        prepared = prepare_stage(open_store(store), suites=list(SUITES), sizes=SuiteSizes(), preset=preset, seed=seed,
                                 triggered_by="posttrain prepare")
    summary = {
        "datasets": {suite: artifact.uri for suite, artifact in prepared.datasets.items()},
        "rows": prepared.rows,
        "tokenizer": prepared.tokenizer.uri,
        "init_checkpoint": prepared.init_checkpoint.uri,
        "parameters": prepared.parameters,
    }
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2) + "\n")
    typer.echo(json.dumps(summary, indent=2))


@app.command()
@model_options(PipelineParams, flags={"reports_dir": "--reports"})
def pipeline(params: PipelineParams) -> None:
    """Run the whole pipeline as a Prefect flow and write its report (what `make demo` runs).

    The run is a spec file (--spec) or a preset's (--preset, specs/NAME.yaml). Stages whose output is
    committed are skipped; a stage that failed resumes from its last committed step."""
    from flows.pipeline import pipeline as pipeline_flow
    from flows.spec import SpecError
    from infra.launch import JOB_PREFIX
    from infra.scratch import private_temp, sweep
    from posttrain.ui import prefect_api

    workdir = Path(os.environ.get("POSTTRAIN_WORKDIR", "runs"))
    sweep(workdir.glob(f"*/{JOB_PREFIX}*"))  # scratch of stage jobs a killed run left behind
    try:
        params.load_spec()  # a bad spec is one line here, not a failed flow run
    except SpecError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    with private_temp(), prefect_api(workdir):
        summary = pipeline_flow(params)
    typer.echo(f"report: {summary['report']}")


@app.command()
def ui(
    host: str = typer.Option("127.0.0.1", help="Address the Prefect server listens on."),
    port: int = typer.Option(4200, help="Port of the Prefect server and its UI."),
    only: list[str] = typer.Option(None, "--only", help="Deploy only these flows (default: every stage and the pipeline)."),
    logs: Path = typer.Option(Path("runs/ui"), help="Where the server's and the deployments' logs go."),
    auth_string: str = typer.Option(None, envvar="PREFECT_SERVER_API_AUTH_STRING", show_default=False,
                                    help="user:password the API and the UI require (HTTP basic auth); "
                                         "needed when --host is not a loopback address."),
) -> None:
    """Start a local Prefect server and serve every stage and the pipeline as deployments: trigger a run
    from the UI's Run form, watch its progress, read its metrics and lineage (runbooks/trigger-a-stage-from-the-ui.md)."""
    from flows.serve import FLOWS
    from infra.scratch import private_temp
    from posttrain.ui import UiError, serve_ui

    flows = only or sorted(FLOWS)
    unknown = sorted(set(flows) - set(FLOWS))
    if unknown:
        raise typer.BadParameter(f"unknown flows {unknown}; known: {sorted(FLOWS)}", param_hint="--only")

    def ready(url: str) -> None:
        console.print(f"Prefect UI: [bold]{url}[/bold]  (deployments: {', '.join(flows)}; Ctrl-C stops)")

    try:
        with private_temp():
            code = serve_ui(host, port, flows, logs, ready, auth_string=auth_string)
        raise typer.Exit(code)
    except UiError as error:
        typer.echo(f"posttrain ui: {error}", err=True)
        raise typer.Exit(1) from error


if __name__ == "__main__":
    app()
