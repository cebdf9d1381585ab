"""What a spec would do, worked out without running anything: `posttrain spec check`.

Every reference is resolved (store names, `NAME:latest`, URIs) and every local file to import is read
and converted as the importer would, so a spec that checks clean fails at no input when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from data_prep.harbor_import import read_tasks
from data_prep.import_data import ImportFailed, convert_records, dataset_label
from flows.spec import PipelineSpec
from flows.stage_table import STAGES
from infra.references import UnresolvedReference, resolve_checkpoint, resolve_dataset
from infra.store import open_store
from model.checks import ModelCheckError, check_model_dir


@dataclass
class StagePlan:
    stage: str
    runs: bool
    starts_from: str = ""
    inputs: list[str] = field(default_factory=list)


@dataclass
class Plan:
    model: str
    data: list[str]
    stages: list[StagePlan]
    problems: list[str]


def plan_spec(spec: PipelineSpec, base: Path) -> Plan:
    store = open_store(spec.store)
    problems: list[str] = []
    data = [f"{suite}: embedded suite, train {sizes.train} / test {sizes.test} (published by the run)"
            for suite, sizes in spec.data.suites.items()]
    for name, entry in spec.data.imports.items():
        path = base / entry.path
        if not path.exists():
            problems.append(f"data.imports.{name}.path: {path}: no such file or folder")
            continue
        try:
            if entry.kind == "harbor":  # each task read and checked; the import plays them in the sandbox too
                rows, refused = read_tasks(path, dataset_label(path, name), played=False)
                bad = [f"{task_folder}: {refusal}" for task_folder, refusal in refused]
            else:
                rows, bad, _ = convert_records(path, entry.kind, dataset_label(path, name))
        except ImportFailed as error:  # a device or FIFO, a file past the limits, a name the store cannot hold
            problems.append(f"data.imports.{name}: {error}")
            continue
        data.append(f"{name}: {path} as {entry.kind}, {len(rows)} rows" + (f", {len(bad)} bad" if bad else ""))
        if bad and not entry.skip_bad_rows:
            problems.append(f"data.imports.{name}: {bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))
        elif not rows:
            problems.append(f"data.imports.{name}: {path}: no rows to import")

    def checked(resolve, reference: str, where: str) -> str:
        try:
            return resolve(store, reference, where)
        except UnresolvedReference as error:
            problems.append(str(error))
            return f"{reference} (unresolved)"

    if spec.model.preset is not None:
        model = f"model preset {spec.model.preset}, built by the run"
    elif spec.model.path is not None:
        path = base / spec.model.path
        try:
            checked = check_model_dir(path)
            model = f"{path}: {checked.architecture}" + ("" if checked.has_dsa else " (no DSA indexer: DSA steps skipped)")
        except ModelCheckError as error:
            problems.append(f"model.path: {error}")
            model = f"{path} (refused)"
    else:
        model = checked(resolve_checkpoint, spec.model.checkpoint, "model.checkpoint")

    stages, previous = [], "the initial model"
    for stage in STAGES:
        section = getattr(spec.stages, stage.name)
        if section is None:
            stages.append(StagePlan(stage.name, runs=False))
            continue
        if stage.learns_from_teachers:
            inputs = [f"teacher {teacher} (share {spec.teacher_share(teacher)})" for teacher in spec.teacher_stages()]
        else:
            inputs = [reference if reference in spec.data.suites or reference in spec.data.imports
                      else checked(resolve_dataset, reference, f"stages.{stage.name}.datasets[{index}]")
                      for index, reference in enumerate(section.datasets)]
        difficulty = getattr(section, "difficulty_filter", None)
        if difficulty is not None:
            inputs.append(f"each filtered by difficulty first: train prompts whose pass rate under {previous} lies in "
                          f"{difficulty.band()} ({difficulty.samples} answers each, {difficulty.reward} >= "
                          f"{difficulty.pass_threshold:g}); test splits unchanged")
        if stage.serves is None:
            stages.append(StagePlan(stage.name, runs=True, starts_from=previous, inputs=inputs))
            previous = f"the {stage.name} checkpoint"
        else:  # the ORM: its trunk is the SFT checkpoint (flows/stage_inputs.py)
            trunk = "the sft checkpoint" if spec.stages.sft is not None else "the initial model"
            stages.append(StagePlan(stage.name, runs=True, starts_from=f"{trunk} (the reward model's trunk)",
                                    inputs=inputs))
    return Plan(model, data, stages, problems)
