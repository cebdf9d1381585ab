# Shared fixtures live in their own modules; pytest finds them through these imports.
import os

# Before Prefect is imported: the servers the tests start send no telemetry, under `make test` or not.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import pytest
from hypothesis import settings

from tests.cluster_fixtures import slurm_cluster, ssh_hosts  # noqa: F401
from tests.model_fixtures import tokenizer, tokenizer_dir  # noqa: F401
from tests.orm_fixtures import trained_orm  # noqa: F401
from tests.pipeline_fixtures import smoke_pipeline  # noqa: F401
from tests.s3_server import faulty_proxy, moto_endpoint, s3_root, store_root  # noqa: F401
from tests.sft_fixtures import nan_init, small_store, two_local_ranks_losses  # noqa: F401
from tests.system_packages import bubblewrap  # noqa: F401

# The tests' own reward modules (tests.*) are an operator's allow-listed package; every stage job and
# `posttrain ui` the tests start inherits it.
os.environ["POSTTRAIN_REWARD_PACKAGES"] = "tests"

# Same examples on every run: a red CI is reproducible and a green one is not luck.
settings.register_profile("posttrain", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("posttrain")


# Files that must share a worker. The fault-injection files kill processes at chosen moments, so they must
# not run beside each other, and the pipeline flow test reads their smoke pipeline: one group, handed out
# first so its ~12 minutes overlap the rest of the run instead of trailing it. The ORM's users share the
# one trained ORM (a session fixture is per worker). Every other file is a group of its own (what --dist
# loadfile would do). The groups are this scheduler's (pytest_xdist_make_scheduler): xdist's own
# `--dist loadgroup` marks a group by rewriting each test's node id, which pytest 9 no longer reads, so its
# groups silently never formed.
SERIAL_FIRST = ("tests/faults/", "tests/test_pipeline_flow.py")
SHARED = {"trained-orm": ("tests/test_orm.py", "tests/test_general_rl.py", "tests/test_reward_contract.py")}


def xdist_group(path: str) -> str:
    if path.startswith(SERIAL_FIRST):
        return "faults-and-smoke-pipeline"
    return next((group for group, paths in SHARED.items() if path in paths), path)


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler (a scope's tests run on one worker, scopes handed out in collection order with
    --no-loadscope-reorder), its scopes being the groups above."""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid.split("::")[0])

    return FileGroups(config, log)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.nodeid.startswith(SERIAL_FIRST))  # stable: collection order otherwise


@pytest.fixture(autouse=True, scope="session")
def _scratch_outside_the_checkout(tmp_path_factory):
    """Stage jobs started without a launcher keep their scratch under POSTTRAIN_WORKDIR (default ./runs):
    the tests' goes to pytest's temporary folder, never into the checkout."""
    os.environ.setdefault("POSTTRAIN_WORKDIR", str(tmp_path_factory.mktemp("workdir")))
