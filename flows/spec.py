"""The pipeline spec: one YAML or JSON file that says what a run trains, on what, and how.

It names the model, the data (embedded suites to publish, local files to import), each stage's typed
recipe with the datasets it reads and how it is evaluated, and the store and seed. A stage left out is
not run. The presets `smoke`, `tiny` and `small` are spec files of this shape (specs/); `posttrain spec
schema` prints the JSON Schema, `posttrain spec check FILE` validates and prints the plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from data_contracts.regular_files import read_regular_file
from data_prep.difficulty_settings import DifficultyFilterSettings
from flows.spec_reading import MAX_SPEC_BYTES, SpecError, read_document
from flows.stage_table import BY_NAME, STAGES, TEACHERS, Stage
from infra.launchers import LaunchSettings, LocalLaunch
from infra.store import StoreRoot
from stages.common.recipe import STRICT, Seed
from suites.prepare import SUITES, SuiteSizes

# The spec files of the presets: the repository's specs/ folder.
SPEC_DIR = Path(__file__).resolve().parent.parent / "specs"
EmbeddedSuite = Literal[tuple(SUITES)]  # type: ignore[valid-type]


def stage_launch():
    return Field(None, description="Where this stage's job runs; default the spec's launch.")


def dataset_refs():
    return Field(..., min_length=1, description=(
        "Datasets by name: an embedded suite of data.suites, an entry of data.imports, SUITE:latest (the newest "
        "committed dataset of that name), a name inside the store, or a URI."))


class ModelSource(BaseModel):
    """Where the initial checkpoint comes from: exactly one of a local Hugging Face directory, a model
    preset, or a committed checkpoint."""

    model_config = STRICT
    path: str | None = Field(None, description="A local Hugging Face checkpoint of GLM-5's architecture with GLM's "
                                               "tokenizer (relative to the spec's folder unless absolute).")
    preset: str | None = Field(None, description="A model preset (model/presets.py), built with a tokenizer "
                                                 "trained on the run's chat data.")
    checkpoint: str | None = Field(None, description="A committed checkpoint: init:latest, a name inside the store, "
                                                     "or a URI.")

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [name for name in ("path", "preset", "checkpoint") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, preset or checkpoint (got {', '.join(given) or 'neither'})")
        return self


class ImportSpec(BaseModel):
    """A local file (JSONL, Parquet), `datasets` folder or (`as: harbor`) folder of Harbor task folders, imported as
    `posttrain data import` does."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    path: str = Field(..., min_length=1, description="Relative to the spec file's folder unless absolute.")
    kind: Literal["chat", "prompt", "preference", "harbor"] = Field(..., alias="as")
    test_fraction: float = Field(0.1, ge=0, lt=1)
    skip_bad_rows: bool = False


class DataSpec(BaseModel):
    model_config = STRICT
    suites: dict[EmbeddedSuite, SuiteSizes] = Field(default_factory=dict, description=(
        "Embedded suites to publish, with their split sizes; a stage names one to read its conversations "
        "(SFT, RL), its prompts (general RL) or its preference pairs (ORM)."))
    imports: dict[str, ImportSpec] = Field(default_factory=dict, description="Local files to import, by the name "
                                                                             "stages use for them.")

    @model_validator(mode="after")
    def _names_apart(self):
        clash = sorted(set(self.suites) & set(self.imports))
        if clash:
            raise ValueError(f"{', '.join(clash)}: both an embedded suite and an import; rename the import")
        return self


TeacherName = Literal[TEACHERS]  # type: ignore[valid-type]


def stage_section(stage: Stage) -> type[BaseModel]:
    """A stage's section of the spec: its own typed recipe, whose fields sit at the section's top level
    (stages.sft.max_steps), plus what the pipeline needs to run it: where it runs, the datasets it reads
    (distillation reads its teachers': each teacher's share of a batch instead), how they are filtered by
    difficulty where its datasets are RL prompts with answers, and how it is evaluated where it has an evaluation
    of its own."""
    fields: dict = {"launch": (LaunchSettings | None, stage_launch())}
    if stage.filters_by_difficulty:
        fields["difficulty_filter"] = (DifficultyFilterSettings | None, Field(None, description=(
            "Off unless set: before the stage runs, keep of each of its datasets' train prompts those whose pass "
            "rate under the checkpoint the stage starts from lies in `pass_rate` (GLM-5's difficulty filter); the "
            "stage reads the filtered datasets, whose test splits are the sources' own. Answers are sampled as the "
            "stage samples (its `sampling`, on its `engines`).")))
    if stage.learns_from_teachers:
        fields["shares"] = (dict[TeacherName, Annotated[int, Field(ge=0)]], Field(default_factory=dict, description=(
            "A teacher's share of each batch; the teachers are the spec's stages that teach with a share above 0 "
            "(default: 1 for the RL stages, 0 for SFT).")))
    else:
        fields["datasets"] = (list[str], dataset_refs())
    if stage.evaluation is not None:
        fields["eval"] = (stage.evaluation, Field(default_factory=stage.evaluation))
    title = "".join(part.capitalize() for part in stage.name.split("_"))
    return create_model(f"{title}Spec", __base__=stage.recipe, __module__=__name__, **fields)


SECTIONS = {stage.name: stage_section(stage) for stage in STAGES}


def recipe_fields(section: BaseModel) -> dict:
    """The section's recipe as JSON, without what only the pipeline reads (launch, datasets, difficulty_filter,
    eval, shares):
    the fields a stage's config is made of, and its run id's digest."""
    recipe = type(section).__base__  # stage_section makes each section of its stage's recipe
    return section.model_dump(mode="json", include=set(recipe.model_fields))


StagesSpec = create_model(
    "StagesSpec", __config__=STRICT, __module__=__name__,
    __doc__="The stages to run, in pipeline order; one left out is skipped. The ORM trains before general RL.",
    **{name: (section | None, None) for name, section in SECTIONS.items()})


class PipelineSpec(BaseModel):
    model_config = STRICT
    model: ModelSource
    data: DataSpec = Field(default_factory=DataSpec)
    stages: StagesSpec
    seed: Seed = Field(0, description="Seed for data, model initialisation and every stage.")
    store: StoreRoot | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    launch: LaunchSettings = Field(default_factory=LocalLaunch, description=(
        "Where every stage's job runs unless its section says otherwise: this machine, Slurm, DeepSpeed's "
        "multi-node launcher, or Kubernetes."))

    @model_validator(mode="after")
    def _stages_have_what_they_need(self):
        for stage in self.included_stages():
            if stage.serves is not None and getattr(self.stages, stage.serves) is None:
                raise ValueError(f"stages.{stage.name}: it only serves {stage.serves}; add stages.{stage.serves} or "
                                 f"drop stages.{stage.name}")
            if stage.learns_from_teachers:
                self._check_teachers(stage)
        return self

    def _check_teachers(self, stage: Stage) -> None:
        """A teacher that is the student itself teaches nothing (SFT alone before distillation)."""
        steps = [s.name for s in self.included_stages() if s.serves is None]
        student = steps[steps.index(stage.name) - 1] if steps.index(stage.name) else None
        if not set(self.teacher_stages()) - {student}:
            raise ValueError(f"stages.{stage.name}: distillation needs a teacher besides its student "
                             f"({f'the {student} checkpoint' if student else 'the initial model'}): one of the "
                             f"stages that teach ({', '.join(TEACHERS)})")
        included = {s.name for s in self.included_stages() if s.teaches}
        missing = sorted(set(getattr(self.stages, stage.name).shares) - included)
        if missing:
            raise ValueError(f"stages.{stage.name}.shares: {', '.join(missing)} is not a stage of this spec")

    def included_stages(self) -> list[Stage]:
        """The stages this spec has a section for, in pipeline order."""
        return [stage for stage in STAGES if getattr(self.stages, stage.name) is not None]

    def teacher_stages(self) -> list[str]:
        """The stages of this spec whose final checkpoints teach in distillation: those that can, with a share."""
        return [stage.name for stage in self.included_stages() if stage.teaches and self.teacher_share(stage.name)]

    def teacher_share(self, name: str) -> int:
        """A teaching stage's share of each distillation batch: the spec's, else the stage table's."""
        shares = self.stages.distill.shares if self.stages.distill is not None else {}
        return shares.get(name, BY_NAME[name].share)


def field_path(location: tuple) -> str:
    """('stages', 'sft', 'datasets', 0) → stages.sft.datasets[0]"""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def parse_spec(document: dict, source: str) -> PipelineSpec:
    try:
        return PipelineSpec.model_validate(document)
    except ValidationError as error:
        problems = [f"{field_path(e['loc']) or '(top level)'}: {e['msg'].removeprefix('Value error, ')}"
                    for e in error.errors()]
        raise SpecError(f"{source}: " + "; ".join(problems)) from None


def load_spec(path: str | Path) -> tuple[PipelineSpec, Path]:
    """The spec in a YAML or JSON file, and the folder its relative import paths are read from."""
    path = Path(path)
    try:
        text = read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{path}: cannot read the spec ({error})") from None
    return parse_spec(read_document(text, str(path), json_text=path.suffix == ".json"), str(path)), \
        path.resolve().parent


def preset_path(name: str) -> Path:
    path = SPEC_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))
        raise SpecError(f"unknown pipeline preset {name!r}; known: {', '.join(known)}")
    return path


def spec_schema() -> dict:
    return PipelineSpec.model_json_schema()
