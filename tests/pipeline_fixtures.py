"""One uninterrupted smoke pipeline per session: the flow's own test reads it, and the fault suite compares
a pipeline killed in every stage against it."""

import pytest
from prefect.settings import PREFECT_API_URL
from prefect.testing.utilities import prefect_test_harness

from flows.params import PipelineParams
from flows.pipeline import pipeline


@pytest.fixture(scope="session")
def smoke_pipeline(tmp_path_factory):
    """{"params", "summary", "tmp", "api_url"}: the smoke preset run to the end on a temporary Prefect server,
    which serves the session's other pipeline runs too (api_url)."""
    tmp_path = tmp_path_factory.mktemp("smoke-pipeline")
    params = PipelineParams(preset="smoke", store=str(tmp_path / "store"), reports_dir=str(tmp_path / "runs"))
    with prefect_test_harness(server_startup_timeout=120):
        yield {"params": params, "summary": pipeline(params), "tmp": tmp_path, "api_url": PREFECT_API_URL.value()}
