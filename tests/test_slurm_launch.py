"""A stage sent to a real Slurm cluster (slurmctld and two slurmd, nodes n1 and n2, on this machine) by its
flow: one rank on each node with the losses of one machine, failures and time-outs with Slurm's word for
them, and a cancelled flow run ending its Slurm job with nothing committed half-way."""

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from prefect import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

from flows.sft import sft
from infra.launchers.slurm import job_fields
from infra.ports import free_port
from infra.store import open_store
from stages.evaluation.settings import EvalSettings
from stages.sft.config import SftConfig
from tests.faults.processes import wait_for
from tests.prefect_servers import own_prefect_server
from tests.sft_fixtures import small_config


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory):
    with own_prefect_server(tmp_path_factory.mktemp("prefect")) as api_url:
        yield api_url


def launch_section(cluster, **fields) -> dict:
    """A `launch` section for the test cluster."""
    return {"kind": "slurm", "nodes": 2, "partition": cluster.partition, "master_port": free_port(),
            "environment": {"OMP_NUM_THREADS": "1"}, **fields}


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    """`launch_section` for the test cluster; this process is its client (sbatch, scontrol read SLURM_CONF)."""
    for name, value in slurm_cluster.environment.items():
        monkeypatch.setenv(name, value)
    return lambda **fields: launch_section(slurm_cluster, **fields)


# The SFT flow as a flow run of its own, as a deployment's runner would execute it.
FLOW_RUN = ("import sys; from pathlib import Path; from flows.sft import sft; from stages.sft.config import SftConfig;"
            " sft(SftConfig.model_validate_json(Path(sys.argv[1]).read_text()))")


@pytest.fixture(scope="module", autouse=True)
def timing_out(prefect_api, slurm_cluster, small_store, tmp_path_factory):
    """(config, flow run process, its log) of an SFT whose Slurm job outlives its time limit, started with the
    file's first test. Slurm's shortest limit is a minute and it checks limits every half minute, so the job
    runs ~90 s: on a core of its own beside the other tests' jobs (a node has two), at the lowest CPU priority
    (it trains on cores nothing else wants), while those tests run."""
    tmp = tmp_path_factory.mktemp("slurm-timeout")
    niced = tmp / "python"
    niced.write_text(f'#!/bin/sh\nexec nice -n 19 {shlex.quote(sys.executable)} "$@"\n')
    niced.chmod(0o755)
    config = small_config(small_store, "slurm-timeout", max_steps=100_000, heldout={"every": 100_000, "samples": 8},
                          launch=launch_section(slurm_cluster, nodes=1, time_limit="1", python=str(niced)))
    run_json, log = tmp / "config.json", tmp / "flow.log"
    run_json.write_text(config.model_dump_json())
    env = {**os.environ, **slurm_cluster.environment, "PREFECT_API_URL": prefect_api}
    with log.open("wb") as output:
        flow = subprocess.Popen([sys.executable, "-c", FLOW_RUN, str(run_json)], env=env, stdout=output,
                                stderr=subprocess.STDOUT)
    yield config, flow, log
    flow.kill()
    flow.wait()


def sft_flow(config: SftConfig, store: dict):
    """The SFT flow's final state, with a small before/after evaluation on arith."""
    arith = next(uri for uri in store["datasets"] if uri.rsplit("/", 1)[-1].startswith("arith-"))
    return sft(config, datasets_by_suite={"arith": arith}, return_state=True,
               eval_settings=EvalSettings(limit_per_suite=4, batch_size=4, max_new_tokens=4))


def flow_logs(flow_run_id) -> list[str]:
    async def read():
        async with get_client() as client:
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            return [log.message for log in logs]
    from prefect.utilities.asyncutils import run_coro_as_sync

    return run_coro_as_sync(read())


def test_a_two_node_sft_has_one_rank_on_each_node_and_the_losses_of_one_machine(prefect_api, slurm, small_store,
                                                                                two_local_ranks_losses):
    config = small_config(small_store, "slurm-two-nodes", launch=slurm())
    state = sft_flow(config, small_store)
    result = state.result()
    assert [r["loss"] for r in result.trained.history] == pytest.approx(two_local_ranks_losses, abs=1e-5)

    lineage = open_store(small_store["root"]).open(result.checkpoint).lineage()
    assert lineage["job"].startswith("slurm:") and lineage["config"]["launch"]["nodes"] == 2
    logs = wait_for(lambda: (lines := flow_logs(state.state_details.flow_run_id)) and
                    any("done" in line for line in lines) and lines, 30, "the flow run's logs", poll_s=0.5)
    job_number = lineage["job"].removeprefix("slurm:")
    assert any(f"job slurm:{job_number} started (slurm)" in line for line in logs)
    assert any('"rank": 0' in line and '"host": "n1"' in line for line in logs), logs
    assert any('"rank": 1' in line and '"host": "n2"' in line for line in logs), logs
    assert job_fields(job_number)["JobState"] == "COMPLETED"


def test_a_stage_that_exits_non_zero_fails_the_flow_run_naming_slurm_state_and_exit_code(prefect_api, slurm,
                                                                                         small_store, nan_init):
    config = small_config(small_store, "slurm-fails", init_checkpoint=nan_init, launch=slurm())
    state = sft_flow(config, small_store)
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert "ended FAILED with exit code 1" in message and "(slurm:" in message
    assert "non-finite loss" in message  # the job's last lines come with it
    assert not open_store(small_store["root"]).is_committed(config.output_name)


def test_a_time_limit_too_short_is_reported_as_a_timeout(timing_out, small_store):
    config, flow, log = timing_out
    flow.wait(timeout=300)
    output = log.read_text()
    assert flow.returncode != 0 and "Finished in state Failed" in output and "ended TIMEOUT" in output, output[-3000:]
    assert not open_store(small_store["root"]).is_committed(config.output_name)


def test_a_cancelled_flow_run_ends_its_slurm_job_within_10_s_with_nothing_committed_half_way(
        prefect_api, slurm, small_store, tmp_path):
    config = small_config(small_store, "slurm-cancel", max_steps=100_000, checkpoint_every=5,
                          heldout={"every": 100_000, "samples": 8}, launch=slurm())
    run_json = tmp_path / "config.json"
    run_json.write_text(config.model_dump_json())
    flow = subprocess.Popen([sys.executable, "-c", FLOW_RUN, str(run_json)], env={**os.environ, "PREFECT_API_URL": prefect_api},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        store = open_store(small_store["root"])
        # Training, past a committed resume point: a cancel now has everything to lose.
        wait_for(lambda: store.list_committed(config.resume_prefix), 240, "a committed resume point", poll_s=0.5)
        job_number = _running_job("posttrain-sft")
        flow.send_signal(signal.SIGTERM)  # what Prefect's runner and workers send a flow run they cancel
        cancelled = time.monotonic()
        wait_for(lambda: job_fields(job_number).get("JobState") == "CANCELLED", 10, "the Slurm job cancelled", 0.2)
        assert time.monotonic() - cancelled < 10
        flow.wait(timeout=60)
    finally:
        flow.kill()
    assert not store.is_committed(config.output_name)
    assert all(store.open(name).verify() == [] for name in store.list_committed(config.resume_prefix))
    assert not subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout.strip()


def _running_job(name: str) -> str:
    shown = subprocess.run(["squeue", "--noheader", "--states=RUNNING", f"--name={name}", "--format=%i"],
                           capture_output=True, text=True, check=True)
    return shown.stdout.split()[0]


def test_a_launch_section_refuses_bad_slurm_settings_naming_the_field():
    fields = dict(init_checkpoint="init", datasets=["d"])
    with pytest.raises(ValueError, match="launch.slurm.time_limit"):
        SftConfig(**fields, launch={"kind": "slurm", "time_limit": "tomorrow"})
    with pytest.raises(ValueError, match="an sbatch option"):
        SftConfig(**fields, launch={"kind": "slurm", "sbatch_options": ["qos=high"]})
    with pytest.raises(ValueError, match="launch.slurm.environment"):
        SftConfig(**fields, launch={"kind": "slurm", "environment": {"A B": "x"}})
