"""Serve every stage flow and the pipeline as deployments of the Prefect server at PREFECT_API_URL.

`python -m flows.serve` registers the deployments and then executes the runs created for them — from
the UI's Run form, the REST API or `prefect deployment run` — until stopped. Each deployment's
parameters are its flow's pydantic config, so the UI renders them as a form, whose checkpoint and dataset
fields offer what the default store holds (flows/pickers.py), kept current as commits land.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time

from prefect import get_client, serve
from prefect.client.schemas.actions import DeploymentUpdate
from prefect.exceptions import ObjectNotFound
from prefect.utilities.callables import parameter_schema

from flows.pickers import store_catalog, with_pickers
from flows.pipeline import pipeline
from flows.stage_table import STAGES
from infra.lifetime import exit_with_owner
from infra.store import open_store

log = logging.getLogger("flows.serve")
FLOWS = {flow.name: flow for flow in (*(stage.load_flow() for stage in STAGES), pipeline)}


def serve_deployments(names: list[str], limit: int | None = None) -> None:
    """Deployments named like their flows (`general_rl/general_rl`); blocks, running what is triggered."""
    unknown = sorted(set(names) - set(FLOWS))
    if unknown:
        raise ValueError(f"unknown flows {unknown}; known: {sorted(FLOWS)}")
    deployments = [FLOWS[name].to_deployment(name=name, description=FLOWS[name].description) for name in names]
    threading.Thread(target=keep_pickers_current, args=(names,), name="pickers", daemon=True).start()
    serve(*deployments, limit=limit, print_starting_message=False)


def keep_pickers_current(names: list[str], every_s: float = 15.0) -> None:
    """Forever: each deployment's form offers what the default store holds (flows/pickers.py), written once the
    deployments are registered and again whenever the store's checkpoints or datasets change."""
    schemas = {name: parameter_schema(FLOWS[name]).model_dump() for name in names}
    shown = None
    while True:
        try:
            catalog = store_catalog(open_store())
            if catalog != shown:
                with get_client(sync_client=True) as client:
                    for name in names:
                        deployment = client.read_deployment_by_name(f"{name}/{name}")
                        client.update_deployment(deployment.id, DeploymentUpdate(
                            parameter_openapi_schema=with_pickers(schemas[name], catalog)))
                shown = catalog
        except ObjectNotFound:  # serve() has not registered them yet
            time.sleep(1.0)
            continue
        except Exception as error:  # an unreadable store or a busy API: the forms keep what they had
            log.warning("the forms' pickers were not refreshed: %s", error)
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=sorted(FLOWS), help="flows to deploy (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="most flow runs at once")
    args = parser.parse_args(argv)
    exit_with_owner()
    serve_deployments(args.only, args.limit)


if __name__ == "__main__":
    main()
