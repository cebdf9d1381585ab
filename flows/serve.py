"""Serve every stage flow and the pipeline as deployments of the Prefect server at PREFECT_API_URL.

`python -m flows.serve` registers the deployments and then executes the runs created for them — from
the UI's Run form, the REST API or `prefect deployment run` — until stopped. Each deployment's
parameters are its flow's pydantic config, so the UI renders them as a form.
"""

from __future__ import annotations

import argparse

from prefect import serve

from flows.pipeline import pipeline
from flows.stage_table import STAGES
from infra.lifetime import exit_with_owner

FLOWS = {flow.name: flow for flow in (*(stage.load_flow() for stage in STAGES), pipeline)}


def serve_deployments(names: list[str], limit: int | None = None) -> None:
    """Deployments named like their flows (`general_rl/general_rl`); blocks, running what is triggered."""
    unknown = sorted(set(names) - set(FLOWS))
    if unknown:
        raise ValueError(f"unknown flows {unknown}; known: {sorted(FLOWS)}")
    deployments = [FLOWS[name].to_deployment(name=name, description=FLOWS[name].description) for name in names]
    serve(*deployments, limit=limit, print_starting_message=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=sorted(FLOWS), help="flows to deploy (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="most flow runs at once")
    args = parser.parse_args(argv)
    exit_with_owner()
    serve_deployments(args.only, args.limit)


if __name__ == "__main__":
    main()
