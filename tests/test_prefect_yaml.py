"""prefect.yaml declares, for work pools, exactly the deployments `posttrain ui` serves, each entrypoint a real flow."""

from pathlib import Path

import yaml
from prefect.flows import load_flow_from_entrypoint

from flows.serve import FLOWS

REPO = Path(__file__).resolve().parents[1]


def test_every_served_flow_is_declared_for_work_pools_with_a_loadable_entrypoint(monkeypatch):
    monkeypatch.chdir(REPO)  # entrypoints are relative to the repository, as a worker's pull step makes them
    declared = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deployments = {d["name"]: d for d in declared["deployments"]}
    assert set(deployments) == set(FLOWS)
    for name, deployment in deployments.items():
        assert deployment["work_pool"]["name"] == "posttrain"
        assert load_flow_from_entrypoint(deployment["entrypoint"]).name == name
