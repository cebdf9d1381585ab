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


def test_no_flow_module_stands_for_a_top_level_package():
    """A worker and `posttrain ui` load a deployment's flow file with its folder on sys.path: a flows/stages.py
    would be imported as the `stages` package by every module the flow imports."""
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert not {path.stem for path in (REPO / "flows").glob("*.py")} & packages
