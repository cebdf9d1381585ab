"""A cluster runs stages through a Prefect process work pool: deployments registered from prefect.yaml, and a
worker on another machine, with the repository checked out elsewhere (POSTTRAIN_REPO), executing them.
Here the other machine is a worker started in an empty folder; the flow can only load its entrypoint
(`flows/sft.py`, relative) if prefect.yaml's pull step moved it into the repository."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings

from infra.lifetime import child_environment, die_with_parent
from infra.ports import free_port
from infra.store import open_store
from posttrain import prefect_db
from posttrain.ui import start_logged, stop_all, wait_for_api
from tests.sft_fixtures import small_config

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).with_name("prefect"))


@pytest.fixture(scope="module")
def prefect_env(tmp_path_factory):
    """A real `prefect server start` with a Prefect home of its own (the default ~/.prefect database is
    shared by every Prefect process on the machine), and the environment its CLI clients need."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": api}
    log = home / "server.log"
    server = None
    try:
        with prefect_db.default_database(home):  # seeded as `posttrain ui` seeds its server's
            server = start_logged([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log)
            wait_for_api(api, server, log, timeout_s=120)
        yield env
    finally:
        stop_all([server] if server is not None else [], grace_s=15)


def _stop_group(leader: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM to the process group, SIGKILL to it if the leader is still there after `grace_s` (a worker
    did not always stop on one SIGTERM)."""
    for stop_signal in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):  # the group is already gone
            os.killpg(leader.pid, stop_signal)
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.wait(timeout=grace_s)
            return


def _cli(env: dict, *args: str) -> None:
    done = subprocess.run([PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_a_worker_elsewhere_runs_a_deployed_sft_stage_to_completion(prefect_env, small_store, tmp_path):
    # What a cluster admin does once: the pool, then the deployments from prefect.yaml (here only sft's:
    # each deployment imports its flow for the parameter schema, seconds apiece).
    _cli(prefect_env, "work-pool", "create", "posttrain", "--type", "process")
    _cli(prefect_env, "deploy", "--name", "sft")

    config = small_config(small_store, "sft-from-the-pool", max_steps=4, heldout={"every": 4, "samples": 4},
                          dsa={"dense_steps": 1, "indexer_warmup_steps": 1})
    # The deployment's form takes no provenance: the flow records it. The flow needs a suite to report
    # before/after metrics on: arith, a few short replies.
    arith = next(uri for uri in small_store["datasets"] if uri.rsplit("/", 1)[-1].startswith("arith-"))
    parameters = {"config": config.model_dump(mode="json", exclude={"provenance"}),
                  "datasets_by_suite": {"arith": arith},
                  "eval_settings": {"limit_per_suite": 4, "batch_size": 4, "max_new_tokens": 4}}
    with temporary_settings(updates={PREFECT_API_URL: prefect_env["PREFECT_API_URL"]}):
        run = run_deployment("sft/sft", parameters=parameters, timeout=0)  # only queued: the worker runs it

    elsewhere = tmp_path / "other-machine"
    elsewhere.mkdir()
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        # Its own process group: the flow run is the worker's child, not ours, and must not outlive the test.
        worker = subprocess.Popen([PREFECT, "worker", "start", "--pool", "posttrain", "--run-once"], cwd=elsewhere,
                                  env=child_environment({**prefect_env, "POSTTRAIN_REPO": str(REPO)}), stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)
    try:
        worker.wait(timeout=240)  # --run-once: it runs what is queued, then exits
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker still runs after 240 s:\n{log.read_text()[-3000:]}")
    finally:
        _stop_group(worker)
    assert worker.returncode == 0, log.read_text()[-3000:]

    with temporary_settings(updates={PREFECT_API_URL: prefect_env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            finished = client.read_flow_run(run.id)
    state = finished.state
    assert state.is_completed(), f"{state}\n{log.read_text()[-3000:]}"
    assert finished.name == config.run_id  # the UI lists it by its run_id
    store = open_store(small_store["root"])
    assert store.is_committed(config.output_name)
    # This run's checkpoint, not one an earlier run left: its lineage names the flow run.
    assert store.open(config.output_name).lineage()["prefect"]["flow_run_id"] == str(run.id)
