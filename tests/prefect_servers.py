"""A Prefect server of the tests' own, started as `posttrain pipeline` starts one: Prefect's server app as a
child that dies with the test process, on a new database seeded from the migrated template. Prefect's test
harness migrates a new database each time (14.7 s of CPU against 4.5 s)."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.settings import PREFECT_API_URL, PREFECT_HOME, PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

from posttrain.ui import prefect_api


@contextmanager
def own_prefect_server(home: Path) -> Iterator[str]:
    """This process's Prefect settings pointed at a new server with `home` for its home and database: its API URL."""
    with temporary_settings(updates={PREFECT_HOME: str(home)},
                            restore_defaults={PREFECT_API_URL, PREFECT_SERVER_DATABASE_CONNECTION_URL}), prefect_api(home):
        yield PREFECT_API_URL.value()
