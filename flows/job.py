"""Run a stage job from a flow: run.json in, streamed log lines and a live progress artifact out."""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

from prefect import get_client, get_run_logger, runtime
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from flows import run_logs
from flows.curves import publish_curves
from flows.engine_pool import leased_engines
from flows.results import Trained
from flows.tracking import PROJECT, wandb_run_id
from infra.launch import StageFailed, run_stage_job
from infra.openlineage import StageRunEvents
from infra.store import open_store
from rollout.engine_settings import EngineSettings
from rollout.engines import launch_engines
from stages.common import checkpointer
from stages.common.config import StageIO
from stages.common.events import parse_event


def progress_line(stage: str, step: int, total: int, started: tuple[float, int], now: float) -> str:
    """`sft: step 40/600, 0.52 steps/s, about 18 min left`. The rate counts the steps this job ran since
    `started` (when, and the first step seen), so a resumed job's earlier steps do not inflate it."""
    done, elapsed = step - started[1], now - started[0]
    if done <= 0 or elapsed <= 0:
        return f"{stage}: step {step}/{total}"
    rate = done / elapsed
    left_s = (total - step) / rate
    left = f"{left_s / 60:.0f} min" if left_s >= 90 else f"{left_s:.0f} s"
    return f"{stage}: step {step}/{total}, {rate:.2f} steps/s, about {left} left"


# Installed as the flows are imported: a run whose parameters are invalid ends before any flow code runs.
run_logs.install()

# The curves artifact is a new version each time: every 5% of the steps (and at the first and the end) keeps
# the UI current without an API call and a database write per step.
CURVE_EVERY_PERCENT = 5


class JobProgress:
    """Forwards each job line to the run log and folds progress events into one progress artifact."""

    def __init__(self, stage: str):
        self.stage = stage
        self.logger = get_run_logger()
        self.artifact_id = create_progress_artifact(progress=0.0, description=f"{stage}: training progress")
        self.history: list[dict] = []
        self.percent_shown = self.percent_curved = 0
        self.final: dict | None = None
        self.error: str | None = None  # the first error a rank reported
        self.started: tuple[float, int] | None = None  # (when, step) of the first step seen: the rate's origin

    def __call__(self, line: str) -> None:
        event = parse_event(line)
        if event is None:
            self.logger.debug(line)
            return
        kind = event["event"]
        if kind == "step":
            self.history.append(event)
            first = self.started is None  # logged: the run's log says when training began
            self.started = self.started or (time.monotonic(), event["step"])
            # Whole percents only: each update is an API call and a database write, and on a small
            # machine the Prefect server competes with the trainer for the same cores.
            percent = 100 * event["step"] // event["total"]
            if percent > self.percent_shown:
                self.percent_shown = percent
                update_progress_artifact(self.artifact_id, progress=float(percent), description=progress_line(
                    self.stage, event["step"], event["total"], self.started, time.monotonic()))
            if percent >= self.percent_curved + CURVE_EVERY_PERCENT or first:
                self.percent_curved = percent
                publish_curves(self.stage, self.history, event["total"])
            if first or event["step"] % 10 == 0 or "heldout_loss" in event:
                self.logger.info(
                    f"{self.stage} step {event['step']}/{event['total']} "
                    + (f"loss {event['loss']:.4f}" if "loss" in event else "no update (no group with signal)")
                    + (f" ({event['phase']})" if "phase" in event else "")
                    + (f" reward {event['reward_mean']:.3f}" if "reward_mean" in event else "")
                    + (f" held-out {event['heldout_loss']:.4f}" if "heldout_loss" in event else "")
                )
        elif kind == "samples":
            self.show_samples(event)
        else:
            self.logger.info(f"{self.stage} {kind}: {json.dumps({k: v for k, v in event.items() if k != 'event'})}")
        if kind == "error" and self.error is None:
            self.error = f"rank {event['rank']}: {event['error']}"
        if kind == "done":
            self.final = event
            update_progress_artifact(self.artifact_id, progress=100.0)
            publish_curves(self.stage, self.history, None)


    def show_samples(self, event: dict) -> None:
        """A table of what the model wrote at this step (the rollout record's decoded samples), one key per
        stage so the UI lists its versions as training goes on."""
        create_table_artifact(key=f"{self.stage.replace('_', '-')}-samples", table=event["samples"],
                              description=f"{self.stage}: samples the policy wrote at step {event['step']}")
        for sample in event["samples"]:
            self.logger.info(f"{self.stage} step {event['step']} sample ({sample['task']}, reward {sample['reward']}): "
                             + sample["completion"][:200].replace("\n", " "))


def run_job(config: StageIO, workdir: Path) -> JobProgress:
    """Run the stage's job where its `launch` says; the run log names the job as its scheduler knows it."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "run.json"
    config_path.write_text(config.model_dump_json(indent=2))
    stage = config.stage_name
    progress = JobProgress(stage)
    try:
        run_stage_job(config.launch, config.entry_module, config_path, progress,
                      on_start=lambda job_id: progress.logger.info(f"{stage}: job {job_id} started ({config.launch.kind})"))
    except StageFailed as failure:
        raise (failure.because(progress.error) if progress.error else failure) from None
    if progress.final is None:
        raise RuntimeError(f"{stage} job finished without reporting its checkpoint")
    return progress


def stage_workdir(config: StageIO) -> Path:
    """Where a stage run's scratch files (rank folders, logs) go on this machine."""
    return Path(os.environ.get("POSTTRAIN_WORKDIR", "runs")) / config.run_id


def train_stage(config: StageIO) -> Trained:
    """Run a stage's trainer on its config; its final checkpoint URI, per-step history and the job's wall time.

    A config whose output is committed (the same config, inputs and code ran to the end before) starts
    no job: its history is read back from the checkpoint, which is what makes an unchanged re-run quick."""
    store = open_store(config.store)
    if store.is_committed(config.output_name):
        artifact = store.open(config.output_name)
        state = json.loads(artifact.read_bytes(checkpointer.TRAINER_STATE))
        get_run_logger().info(f"{config.stage_name}: {artifact.uri} is committed for this config, inputs and code; not retrained")
        return Trained(artifact.uri, state["history"], train_s=0.0, skipped=True)
    started = time.monotonic()
    provenance = config.provenance
    lineage_events = StageRunEvents(config.stage_name, config.run_id, provenance.flow_run_id, provenance.flow_name)
    lineage_events.start()
    try:
        progress = run_job(config, stage_workdir(config))
    except BaseException as error:
        lineage_events.fail(error)
        raise
    lineage_events.complete(store.open(progress.final["checkpoint"]))
    return Trained(progress.final["checkpoint"], progress.history, train_s=round(time.monotonic() - started, 1))


def with_flow_provenance(config: StageIO) -> StageIO:
    """The config with the running flow (and its deployment) and the stage's wandb run recorded as its
    provenance, for lineage; the flow run takes the stage's run_id as its name."""
    name_flow_run(config.run_id)
    return config.model_copy(update={"provenance": config.provenance.model_copy(update={
        "flow_run_id": str(runtime.flow_run.id), "deployment_id": runtime.deployment.id,
        "flow_name": runtime.flow_run.flow_name,
        "triggered_by": config.provenance.triggered_by or "prefect",
        "wandb_run": f"{PROJECT}/{wandb_run_id(config)}",
    })})


def name_flow_run(name: str, flow_run_id=None) -> None:
    """The flow run (by default the running one) renamed `name` (a stage's run_id, a pipeline's run id): the UI
    lists runs by the name a person typed or a report shows, not by Prefect's two random words."""
    with get_client(sync_client=True) as client:
        client.set_flow_run_name(flow_run_id or runtime.flow_run.id, name)


def named_by_its_run_id(flow, flow_run, state) -> None:
    """A stage flow's on_failure hook: a run whose parameters failed validation never ran the body that names it,
    so it is named here by the run_id typed into its form, read from the parameters as they were sent."""
    config = flow_run.parameters.get("config")
    run_id = config.get("run_id") if isinstance(config, dict) else getattr(config, "run_id", None)
    if isinstance(run_id, str) and run_id and flow_run.name != run_id:
        name_flow_run(run_id, flow_run.id)


def with_shared_engine(stack: ExitStack, config):
    """The config pointed at one engine for the whole stage, unless it names running ones or will not train.

    One engine serves the evaluation before, the training and the evaluation after: each engine start
    costs seconds of stage time. Inside a pipeline it is leased from the run's pool (flows/engine_pool.py), else
    started for the stage. With several ranks, or a job on other machines, each rank starts its own.
    """
    if config.engines.running or not runs_here(config) or open_store(config.store).is_committed(config.output_name):
        return config
    precision, decoding = config.compute.precision, config.engines.decoding()
    leased = stack.enter_context(leased_engines(config.init_checkpoint, exclusive=True, precision=precision,
                                                decoding=decoding))
    if leased is not None:
        return config.model_copy(update={"engines": config.engines.model_copy(update={"engine_urls": leased.engine_urls})})
    # The stage's job pushes its weights inside its own scratch folder, under the stage's.
    fleet = launch_engines(stack, EngineSettings(precision=precision, **decoding), config.init_checkpoint,
                           stage_workdir(config), seed=config.seed, weights_dirs=[stage_workdir(config)])()
    return config.model_copy(update={"engines": config.engines.model_copy(update={"engine_urls": [fleet.url]})})


def runs_here(config) -> bool:
    """The stage's job is one rank on this machine: engines started here can serve it."""
    return config.launch.kind == "local" and config.launch.nproc == 1


def evaluation_engines(config) -> EngineSettings:
    """The engines a stage's evaluations run on: the running ones the stage trains with (the shared one
    above), else one started for each evaluation (behind a router its requests would be split by group)."""
    return config.engines if config.engines.running else EngineSettings()
