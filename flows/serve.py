"""Serve every stage flow and the pipeline as deployments of the Prefect server at PREFECT_API_URL.

`python -m flows.serve` registers the deployments and then executes the runs created for them — from
the UI's Run form, the REST API or `prefect deployment run` — until stopped. Each deployment's
parameters are its flow's pydantic config, so the UI renders them as a form, whose checkpoint and dataset
fields offer what the default store holds (flows/pickers.py), kept current as commits land, and whose optional
fields are drawn as their one type (flows/form_schema.py).
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

from flows.form_schema import for_the_form
from flows.pickers import Catalog, store_catalog, with_pickers
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
    threading.Thread(target=keep_forms_current, args=(names,), name="forms", daemon=True).start()
    serve(*deployments, limit=limit, print_starting_message=False)


def keep_forms_current(names: list[str], store_every_s: float = 15.0, forms_every_s: float = 2.0) -> None:
    """Forever: each deployment's form draws optional fields as their one type (flows/form_schema.py) and offers
    what the default store holds (flows/pickers.py). The store is read every `store_every_s`; a form that differs
    from what it should be (registered or re-registered by serve() with the flow's own schema, or a store that
    changed) is rewritten within `forms_every_s`. An unreadable store leaves the pickers out, not the form."""
    schemas = {name: for_the_form(parameter_schema(FLOWS[name]).model_dump()) for name in names}
    catalog, read_at = Catalog((), ()), -store_every_s
    while True:
        if time.monotonic() - read_at >= store_every_s:
            read_at = time.monotonic()
            try:
                catalog = store_catalog(open_store())
            except Exception as error:  # the forms keep the pickers they had
                log.warning("the forms' pickers were not refreshed: %s", error)
        try:
            with get_client(sync_client=True) as client:
                for name in names:
                    wanted = with_pickers(schemas[name], catalog)
                    deployment = client.read_deployment_by_name(f"{name}/{name}")
                    if deployment.parameter_openapi_schema != wanted:
                        client.update_deployment(deployment.id, DeploymentUpdate(parameter_openapi_schema=wanted))
        except ObjectNotFound:  # serve() has not registered them yet
            pass
        except Exception as error:  # a busy API: the next round writes them
            log.warning("the forms were not rewritten: %s", error)
        time.sleep(forms_every_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=sorted(FLOWS), help="flows to deploy (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="most flow runs at once")
    args = parser.parse_args(argv)
    exit_with_owner()
    serve_deployments(args.only, args.limit)


if __name__ == "__main__":
    main()
