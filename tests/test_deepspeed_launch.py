"""A stage started on two "hosts" by DeepSpeed's own multi-node launcher over pdsh and a real sshd on this
machine: one rank per host with the losses of one machine; a failing rank fails the job with its exit code
and leaves no process behind on any host."""

import time
from pathlib import Path

import psutil
import pytest

from infra.launch import StageFailed, run_stage_job
from infra.launchers.deepspeed import DeepSpeedLaunch
from infra.ports import free_port
from infra.store import open_store
from stages.common.events import parse_event
from tests.sft_fixtures import losses, small_config


@pytest.fixture
def two_hosts(ssh_hosts, monkeypatch) -> DeepSpeedLaunch:
    for name, value in ssh_hosts.environment.items():  # the ssh that knows the hosts, and pdsh told to use it
        monkeypatch.setenv(name, value)
    return DeepSpeedLaunch(hosts=[{"name": host, "slots": 1} for host in ssh_hosts.hosts], master_addr="127.0.0.1",
                           master_port=free_port(), environment={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"})


def run_on(launch: DeepSpeedLaunch, config, workdir: Path, lines: list[str]) -> list[dict]:
    """The job's events; every output line into `lines`, also when it fails, and printed (a test that times out
    shows how far the job got)."""
    path = workdir / config.run_id / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(config.model_dump_json())

    def keep(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    run_stage_job(launch, "stages.sft.train", path, keep)
    return [event for line in lines if (event := parse_event(line))]


def test_one_rank_on_each_host_with_the_losses_of_one_machine(two_hosts, small_store, two_local_ranks_losses,
                                                              tmp_path):
    config = small_config(small_store, "deepspeed-two-hosts", launch=two_hosts.model_dump())
    lines: list[str] = []
    events = run_on(two_hosts, config, tmp_path, lines)
    assert losses(events) == pytest.approx(two_local_ranks_losses, abs=1e-5)
    # pdsh labels each line with its host; each rank says where it runs.
    ranks = {(line.split(":")[0], event["rank"]) for line in lines if (event := parse_event(line)) and event["event"] == "rank"}
    assert ranks == {("node1", 0), ("node2", 1)}
    lineage = open_store(small_store["root"]).open(config.output_name).lineage()
    assert lineage["job"].startswith("deepspeed:node1:")


def test_a_failing_rank_fails_the_job_with_its_exit_code_and_leaves_no_process(two_hosts, small_store, nan_init,
                                                                               tmp_path):
    config = small_config(small_store, "deepspeed-fails", init_checkpoint=nan_init)
    lines: list[str] = []
    with pytest.raises(StageFailed) as failure:
        run_on(two_hosts, config, tmp_path, lines)
    assert failure.value.returncode == 1 and failure.value.end.state == "FAILED"
    assert any(line.startswith("node1: ") and "non-finite loss" in line for line in lines)
    assert not open_store(small_store["root"]).is_committed(config.output_name)
    # The ranks ran under sshd, not under this process: look for them by their run.json anywhere.
    deadline = time.monotonic() + 10
    while (left := _processes_naming(str(tmp_path / config.run_id))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []


def _processes_naming(text: str) -> list[str]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if text in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


class FlowCancelled(Exception):
    """Stands for what stops a flow run's process while its job runs (Prefect's TerminationSignal, Ctrl-C)."""


def test_a_cancel_mid_training_stops_the_ranks_on_every_host(two_hosts, small_store, tmp_path):
    config = small_config(small_store, "deepspeed-cancel", max_steps=100_000, heldout={"every": 100_000, "samples": 8})
    lines: list[str] = []

    def cancel_at_step_two(line: str) -> None:
        lines.append(line)
        if (event := parse_event(line)) and event["event"] == "step" and event["step"] == 2:
            raise FlowCancelled

    path = tmp_path / config.run_id / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(config.model_dump_json())
    started = time.monotonic()
    with pytest.raises(FlowCancelled):
        run_stage_job(two_hosts, "stages.sft.train", path, cancel_at_step_two)
    assert _processes_naming(str(path)) == [], "the cancel returned before the ranks were gone"
    assert time.monotonic() - started < 120
    assert not open_store(small_store["root"]).is_committed(config.output_name)
