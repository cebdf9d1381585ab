"""One uninterrupted smoke pipeline per session: the flow's own test reads it, and the fault suite compares
a pipeline killed in every stage against it."""

import pytest

from flows.params import PipelineParams
from flows.pipeline import pipeline
from tests.prefect_servers import own_prefect_server


@pytest.fixture(scope="session")
def smoke_pipeline(tmp_path_factory):
    """{"params", "summary", "tmp", "api_url"}: the smoke preset run to the end on a temporary Prefect server,
    which serves the session's other pipeline runs too (api_url)."""
    tmp_path = tmp_path_factory.mktemp("smoke-pipeline")
    params = PipelineParams(preset="smoke", store=str(tmp_path / "store"), reports_dir=str(tmp_path / "runs"))
    with own_prefect_server(tmp_path / "prefect") as api_url:
        yield {"params": params, "summary": pipeline(params), "tmp": tmp_path, "api_url": api_url}
