"""The `launch` section: one choice in every stage's form, a pipeline-wide default with per-stage overrides
in a spec, and what each launcher generates from it (the Slurm batch script, DeepSpeed's hostfile and
environment file)."""

import os
import subprocess
from pathlib import Path

import pytest

from flows.params import PipelineParams
from flows.spec import parse_spec
from flows.stage_configs import distill_config, stage_config, stage_run_id
from flows.stage_table import STAGES
from infra.launch import JobEnd, JobRequest, StageFailed
from infra.launchers import DeepSpeedLaunch, SlurmLaunch
from infra.lifetime import OWNER_ENV
from stages.distill.config import TeacherSpec
from stages.sft.config import SftConfig

REQUEST = JobRequest("stages.sft.train", Path("/shared/runs/sft-1/run.json"), Path("/shared/runs/sft-1/job-ab12"),
                     "posttrain-sft")
STAGE_CONFIGS = tuple(stage.config for stage in STAGES)


def _oneofs(node) -> int:
    if isinstance(node, dict):
        return ("oneOf" in node) + sum(_oneofs(value) for value in node.values())
    return sum(_oneofs(value) for value in node) if isinstance(node, list) else 0


@pytest.mark.parametrize("config_type", STAGE_CONFIGS)
def test_every_stage_form_offers_the_four_launchers_as_one_choice(config_type):
    schema = config_type.model_json_schema()
    choices = [schema["$defs"][ref["$ref"].rsplit("/", 1)[-1]]["title"] for ref in schema["properties"]["launch"]["anyOf"]]
    assert choices == ["This machine", "Slurm", "DeepSpeed multi-node", "Kubernetes"]
    assert _oneofs(schema) == 0  # Prefect's form renders anyOf only
    assert config_type.model_fields["launch"].get_default(call_default_factory=True).kind == "local"


SPEC = {
    "model": {"preset": "glm5-tiny"},
    "data": {"suites": {"arith": {"train": 8, "test": 4}}},
    "launch": {"kind": "slurm", "nodes": 2, "gpus_per_node": 8, "partition": "gpu"},
    "stages": {
        "sft": {"datasets": ["arith"]},
        "reasoning_rl": {"datasets": ["arith"]},
        "distill": {"shares": {"sft": 1}, "launch": {"kind": "kubernetes", "image": "registry.example.com/posttrain:1", "nodes": 2}},
    },
}
PREPARED = {"init_checkpoint": "file:///store/checkpoints/init/x", "stages": {"sft": ["file:///store/datasets/a"]}}


def test_a_spec_launches_every_stage_where_it_says_and_a_section_overrides_it():
    spec = parse_spec(SPEC, "spec.yaml")
    sft = stage_config(spec, "sft", PREPARED, PREPARED["init_checkpoint"], "c")
    assert isinstance(sft.launch, SlurmLaunch) and sft.launch.nodes == 2 and sft.launch.partition == "gpu"
    teacher = TeacherSpec(source="reasoning_rl", checkpoint="file:///store/checkpoints/reasoning_rl/x",
                          datasets=["file:///store/datasets/a"])
    distill = distill_config(spec, "file:///store/checkpoints/reasoning_rl/x", [teacher])
    assert distill.launch.kind == "kubernetes" and distill.launch.image == "registry.example.com/posttrain:1"
    # Where a job runs does not change what it computes: the run id (and so resume and skip) is the same.
    local = parse_spec({**SPEC, "launch": {"kind": "local"}}, "spec.yaml")
    assert stage_config(local, "sft", PREPARED, PREPARED["init_checkpoint"], "c").run_id == sft.run_id
    fields = sft.model_dump(mode="json", exclude={"run_id", "provenance", "output_name"})
    assert stage_run_id("sft", fields, "c") == stage_run_id("sft", {**fields, "launch": {"kind": "local"}}, "c")


def test_nproc_on_the_command_line_changes_only_the_stages_that_run_here(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(__import__("json").dumps({**SPEC, "launch": {"kind": "local"}}))
    _, spec, _ = PipelineParams(spec=str(spec_file), nproc=2).load_spec()
    assert spec.launch.nproc == 2 and spec.stages.distill.launch.kind == "kubernetes"


def test_a_bad_launch_is_refused_naming_its_field():
    with pytest.raises(ValueError, match="launch.deepspeed.hosts.0.name"):
        SftConfig(run_id="r", init_checkpoint="i", datasets=["d"], launch={"kind": "deepspeed",
                                                                             "hosts": [{"name": "a b"}]})
    with pytest.raises(ValueError, match="launch.kubernetes.image"):
        SftConfig(run_id="r", init_checkpoint="i", datasets=["d"], launch={"kind": "kubernetes"})
    with pytest.raises(ValueError, match="stages.sft.launch"):
        parse_spec({**SPEC, "stages": {"sft": {"datasets": ["arith"], "launch": {"kind": "pbs"}}}}, "spec.yaml")


def test_the_slurm_script_asks_for_what_the_section_says_and_is_valid_bash():
    launch = SlurmLaunch(nodes=2, gpus_per_node=8, cpus_per_task=64, partition="gpu", account="lm", time_limit="12:00:00",
                         sbatch_options=["--qos=high", "--exclusive"], environment={"NCCL_DEBUG": "WARN", "X": "a b"},
                         python="/opt/venv/bin/python")
    script = launch.batch_script(REQUEST)
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")]
    assert {"--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=64", "--partition=gpu",
            "--account=lm", "--time=12:00:00", "--qos=high", "--exclusive", "--job-name=posttrain-sft",
            "--output=/shared/runs/sft-1/job-ab12/slurm-%j.out"} <= set(directives)
    assert "export X='a b'" in script and "export OMP_NUM_THREADS=8" in script
    assert "export POSTTRAIN_JOB_DIR=/shared/runs/sft-1/job-ab12" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "/opt/venv/bin/python -m torch.distributed.run --nnodes=2 --nproc_per_node=8 --node_rank=$SLURM_NODEID" in srun
    assert "-m stages.sft.train --config /shared/runs/sft-1/run.json" in srun
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_deepspeed_gets_a_hostfile_and_an_environment_file_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("POSTTRAIN_STORE", "s3://bucket/posttrain")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t value")
    monkeypatch.setenv(OWNER_ENV, str(os.getpid()))
    monkeypatch.setenv("UNRELATED", "x")
    launch = DeepSpeedLaunch(hosts=[{"name": "gpu-1", "slots": 8}, {"name": "gpu-2", "slots": 8}], master_port=29600)
    assert launch.hostfile_lines() == ["gpu-1 slots=8", "gpu-2 slots=8"]
    lines = launch.environment_file_lines()
    assert "POSTTRAIN_STORE=s3://bucket/posttrain" in lines and "AWS_SECRET_ACCESS_KEY='s3cr3t value'" in lines
    # Our owner pid names a process of this machine; a rank on another host must not watch it.
    assert not [line for line in lines if line.startswith((OWNER_ENV, "UNRELATED"))]
    command = launch.command(REQUEST, tmp_path / "hostfile")
    assert command[1:4] == ["-m", "deepspeed.launcher.runner", "--hostfile"]
    assert command[-4:] == ["--module", "stages.sft.train", "--config", "/shared/runs/sft-1/run.json"]
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    with pytest.raises(RuntimeError, match="not inside a Slurm allocation"):
        DeepSpeedLaunch().hostfile_lines()


@pytest.mark.parametrize("field", ["partition", "account"])
def test_a_slurm_name_holding_a_shell_line_is_refused_naming_its_field(field):
    with pytest.raises(ValueError, match=field):
        SlurmLaunch(**{field: "gpu\ntouch PWNED"})
    with pytest.raises(ValueError, match=field):
        SlurmLaunch(**{field: "gpu;touch PWNED"})
    assert SlurmLaunch(partition="gpu,gpu-long").partition == "gpu,gpu-long"


def test_a_container_image_is_one_word_of_the_srun_command(tmp_path):
    marker = tmp_path / "PWNED"
    script = SlurmLaunch(container_image=f"img; touch {marker}").batch_script(REQUEST)
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert f"'--container-image=img; touch {marker}'" in srun
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


@pytest.mark.parametrize("launch, field", [
    ({"hosts": [{"name": "gpu1\n"}]}, "hosts.0.name"),  # a second hostfile line
    ({"hosts": [{"name": "-oProxyCommand=touch PWNED"}]}, "hosts.0.name"),  # an ssh option
    ({"master_addr": "a b;c"}, "master_addr"),
    ({"environment": {"OK\n": "x"}}, "environment"),
    ({"environment": {"OK": "x\rtouch PWNED"}}, "environment"),
])
def test_deepspeed_hosts_and_variables_are_names_and_one_line_values(launch, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        DeepSpeedLaunch(**launch)
    assert DeepSpeedLaunch(hosts=[{"name": "gpu-1.cluster"}], master_addr="10.0.0.1").master_addr == "10.0.0.1"


def test_a_failed_job_that_said_why_is_one_line_and_one_that_did_not_shows_its_last_lines():
    tail = ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: boom"]
    silent = StageFailed("stages.sft.train", "slurm:42", JobEnd("FAILED", 1), tail)
    assert str(silent).endswith("last lines:\n" + "\n".join(tail)) and "(slurm:42)" in str(silent)
    said = silent.because("rank 0: ValueError: optimizer.warmup_steps 5 exceeds max_steps 3")
    # A run's state message: the job's own account, no traceback (that stays in the run's log).
    assert str(said) == ("stages.sft.train (slurm:42) ended FAILED with exit code 1: "
                         "rank 0: ValueError: optimizer.warmup_steps 5 exceeds max_steps 3")
    assert said.tail == tail and said.returncode == 1
