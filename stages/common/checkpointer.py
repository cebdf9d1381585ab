"""The one checkpointer every trainer uses: resume, commit resume state, commit the final checkpoint.

A checkpoint is a Hugging Face directory (safetensors + config + tokenizer) with DeepSpeed's resume
state under `deepspeed/`, the trainer's own state in `trainer_state.json` (with that of the parts a stage
keeps across steps, e.g. its prompts' pass rates), every step's metrics so far
in `metrics.jsonl`, and its lineage (with the eval summary: the `heldout_*` metrics of the last step
that computed them, and for a stage that records its samples, the shards of every step's trained samples
as `rollouts` inputs: stages/common/rollout_record.py). Only rank 0 commits; a crash before `_SUCCESS` leaves nothing a reader or a
resume would pick up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from data_contracts.lineage import (
    DataInput,
    Lineage,
    MtpRecord,
    PrefectRunRef,
    RewardModuleRef,
    config_digest,
    current_code_version,
    library_versions,
)
from infra.launch import JOB_ID_ENV
from infra.publish import data_input, parent_ref, publish_for_inputs, published_contract
from infra.store import ArtifactStore, CommittedArtifact, open_store
from stages.common.config import Provenance, RolloutRecordSettings, StageIO
from stages.common.distributed import barrier
from stages.common.finite import check_finite_parameters
from stages.common.hf_weights import save_hf
from stages.common.inputs import StageInputs
from stages.common.mtp_training import mtp_record
from stages.common.rollout_record import RolloutRecord

# Wall-clock measurements (seconds, rates: every key ending in `_s`), how requests happened to spread over
# replicas and a process's peak memory differ between two runs of one config. They are left out of the
# checkpoint's files, so identical training gives an identical digest (and a rerun dedupes); the event
# stream still has them.
VOLATILE_METRICS = ("replicas", "peak_memory_mb")
DEEPSPEED_DIR = "deepspeed"
TRAINER_STATE = "trainer_state.json"
METRICS = "metrics.jsonl"
STEP_NAME = re.compile(r"step-(\d+)$")


class Resumable(Protocol):
    """A part of a trainer whose state a resumed run restores (its `state()` is JSON)."""

    def state(self) -> dict: ...

    def restore(self, state: dict) -> None: ...


def save_local(engine, model, tokenizer, local_dir: Path, step: int, trainer_state: dict, is_main: bool) -> None:
    """Every rank writes its DeepSpeed shards; rank 0 adds `model`'s Hugging Face files (the engine may
    train a wrapper around it), consolidated and merged (stages/common/hf_weights.py)."""
    if is_main and local_dir.exists():
        shutil.rmtree(local_dir)
    barrier()
    engine.save_checkpoint(str(local_dir / DEEPSPEED_DIR), tag=f"step-{step}", client_state={"step": step})
    save_hf(model, local_dir, is_main)
    if is_main:
        tokenizer.save_pretrained(local_dir)
        (local_dir / TRAINER_STATE).write_text(json.dumps({**trainer_state, "step": step}, indent=2))
    barrier()


def commit(store: ArtifactStore, name: str, local_dir: Path, lineage: Lineage, is_main: bool) -> str | None:
    uri = publish_for_inputs(store, name, local_dir, lineage).uri if is_main else None
    barrier()
    return uri


def stable_metrics(record: dict) -> dict:
    return {key: value for key, value in record.items() if not key.endswith("_s") and key not in VOLATILE_METRICS}


def step_artifact_name(prefix: str, step: int) -> str:
    return f"{prefix}step-{step:06d}"


def latest_committed(store: ArtifactStore, prefix: str) -> tuple[int, CommittedArtifact] | None:
    steps = []
    for name in store.list_committed(prefix):
        match = STEP_NAME.search(name)
        if match and name.startswith(prefix):
            steps.append((int(match.group(1)), name))
    if not steps:
        return None
    step, name = max(steps)
    return step, store.open(name)


def restore(engine, artifact: CommittedArtifact, local_dir: Path, step: int, is_local_main: bool) -> dict:
    """Load model, optimizer and scheduler state of `artifact` into the engine; returns the trainer state."""
    if is_local_main:
        if local_dir.exists():
            shutil.rmtree(local_dir)
        artifact.download(local_dir)
    barrier()
    engine.load_checkpoint(str(local_dir / DEEPSPEED_DIR), tag=f"step-{step}")
    return json.loads((local_dir / TRAINER_STATE).read_text())


def stage_lineage(
    *, name: str, config: dict, seed: int, init: CommittedArtifact, inputs: list[DataInput], provenance: Provenance,
    teachers: list[CommittedArtifact] = (), reward_modules: list[RewardModuleRef] = (),
    reward_models: list[CommittedArtifact] = (), eval_summary: dict[str, float] | None = None,
    mtp: MtpRecord | None = None,
) -> Lineage:
    prefect = None
    if provenance.flow_run_id or provenance.deployment_id:
        prefect = PrefectRunRef(flow_run_id=provenance.flow_run_id, deployment_id=provenance.deployment_id,
                                flow_name=provenance.flow_name)
    return Lineage(
        kind="checkpoint", name=name,
        parents=[parent_ref(init, "init"), *(parent_ref(teacher, "teacher") for teacher in teachers),
                 *(parent_ref(model, "reward_model") for model in reward_models)],
        inputs=inputs, code=current_code_version(), config=config, config_sha256=config_digest(config),
        reward_modules=list(reward_modules), libraries=library_versions(), seed=seed, prefect=prefect,
        job=os.environ.get(JOB_ID_ENV), triggered_by=provenance.triggered_by, wandb_run=provenance.wandb_run, eval_summary=eval_summary or {},
        mtp=mtp,
    )


def reward_model_checkpoints(refs: list[RewardModuleRef], default_store: ArtifactStore) -> list[CommittedArtifact]:
    """The checkpoints reward modules score with (an ORM, a GRM's judge): each module whose params name
    a `checkpoint` (in its own `store`, or the stage's). They are the reward models of the lineage DAG."""
    models = {}
    for ref in refs:
        if isinstance(ref.params.get("checkpoint"), str):
            store = open_store(ref.params["store"]) if ref.params.get("store") else default_store
            artifact = store.open(ref.params["checkpoint"])
            models[artifact.uri] = artifact
    return list(models.values())


def eval_summary(history: list[dict]) -> dict[str, float]:
    """The `heldout_*` metrics of the last step that computed any (SFT's loss, the ORM's accuracy)."""
    evaluated = [record for record in history if any(key.startswith("heldout_") for key in record)]
    return {key: value for key, value in evaluated[-1].items() if key.startswith("heldout_")} if evaluated else {}


class StageCheckpointer:
    """A trainer's state on the store. `resume()` before the first step, `end_of_step(record)` after each
    (commits resume state every `config.checkpoint_every` steps but the last), `finish()` at the end
    (commits the final checkpoint under `config.output_name`).

    `model` is the Hugging Face model inside `engine` (the engine may train a wrapper around it);
    `reward_refs` and `teachers` go into every commit's lineage, with the reward models the refs name;
    each of `parts` is saved under its name in the trainer state and restored by `resume()` (rank 0's: the
    stage keeps them alike on every rank).
    """

    def __init__(self, config: StageIO, stage: StageInputs, engine, model, tokenizer, *,
                 reward_refs: Sequence[RewardModuleRef] = (), teachers: Sequence[CommittedArtifact] = (),
                 record: RolloutRecordSettings | None = None, parts: Mapping[str, Resumable] | None = None):
        self.config, self.stage, self.engine, self.model, self.tokenizer = config, stage, engine, model, tokenizer
        self.reward_refs, self.teachers, self.parts = list(reward_refs), list(teachers), dict(parts or {})
        self.history: list[dict] = []
        self.resumed_from: str | None = None
        self.rollouts = None if record is None else RolloutRecord(
            stage.store, record, stage=config.stage_name, prefix=f"{config.output_name}-rollouts/",
            template=self.lineage(f"{config.stage_name} {config.run_id}", []), dist=stage.dist,
            scratch=stage.workdir / "rollouts", events=stage.events, tokenizer=tokenizer)

    def resume(self) -> int:
        """Restore the last committed step into the engine (and its history); the step to start from."""
        stage = self.stage
        latest = latest_committed(stage.store, self.config.resume_prefix)
        if latest is None:
            return 0
        step, artifact = latest
        state = restore(self.engine, artifact, stage.workdir / "resume", step, stage.dist.local_rank == 0)
        self.history, self.resumed_from = state["history"], artifact.uri
        if self.rollouts is not None:
            self.rollouts.restore(state.get("rollouts", {}))
        for name, part in self.parts.items():
            if name in state:  # a part switched on since that commit starts afresh
                part.restore(state[name])
        stage.events.emit("resumed", step=step, checkpoint=artifact.uri)
        return step

    def end_of_step(self, record: dict, samples: list[dict] | None = None) -> None:
        """Keep and announce the step's metrics, with its trained `samples` (rollout@1 rows) on record when
        the stage records them; commit resume state when the step is due one."""
        step = record["step"]
        if self.rollouts is not None and samples is not None:
            record = {**record, **self.rollouts.write(step, samples)}
        self.history.append(record)
        self.stage.events.emit("step", total=self.config.max_steps, **record)
        if step % self.config.checkpoint_every == 0 and step < self.config.max_steps:
            uri = self.commit(step, step_artifact_name(self.config.resume_prefix, step))
            self.stage.events.emit("committed", step=step, checkpoint=uri)

    def finish(self) -> str | None:
        """Commit the final checkpoint and announce it; its URI (None on ranks other than 0)."""
        uri = self.commit(self.config.max_steps, self.config.output_name)
        if self.rollouts is not None:
            self.rollouts.close()
        self.stage.events.emit("done", checkpoint=uri, resumed_from=self.resumed_from, already_committed=False,
                               **eval_summary(self.history))
        return uri

    def commit(self, step: int, name: str) -> str | None:
        config, stage = self.config, self.stage
        check_finite_parameters(self.model, f"{config.stage_name} {config.run_id} step {step}")
        local = stage.workdir.parent / "commit" / f"step-{step}"
        history = [stable_metrics(record) for record in self.history]
        rollouts = self.rollouts.inputs(step) if self.rollouts is not None else []
        state = {"history": history, **({"rollouts": self.rollouts.state()} if self.rollouts is not None else {}),
                 **{name: part.state() for name, part in self.parts.items()}}
        save_local(self.engine, self.model, self.tokenizer, local, step, state, stage.dist.is_main)
        if stage.dist.is_main:
            (local / METRICS).write_text("".join(json.dumps(record) + "\n" for record in history))
        lineage = self.lineage(f"{config.stage_name} {config.run_id} step {step}", rollouts)
        uri = commit(stage.store, name, local, lineage, stage.dist.is_main)
        if stage.dist.local_rank == 0:  # committed (or failed): the local copy is only scratch
            shutil.rmtree(local, ignore_errors=True)
        return uri

    def lineage(self, name: str, rollouts: list[DataInput]) -> Lineage:
        """The stage's lineage record: its datasets and the `rollouts` it trained on as inputs."""
        config, stage = self.config, self.stage
        return stage_lineage(
            name=name, config=config.model_dump(mode="json"), seed=config.seed, init=stage.init,
            inputs=[*(data_input(dataset, None, published_contract(dataset)) for dataset in stage.datasets), *rollouts],
            provenance=config.provenance, reward_modules=self.reward_refs,
            reward_models=reward_model_checkpoints(self.reward_refs, stage.store), teachers=self.teachers,
            eval_summary=eval_summary(self.history), mtp=mtp_record(self.model, getattr(config, "mtp", None)),
        )
