"""The pipeline spec: one YAML or JSON file that says what a run trains, on what, and how.

It names the model, the data (embedded suites to publish, local files to import), each stage's typed
recipe with the datasets it reads and how it is evaluated, and the store and seed. A stage left out is
not run. The presets `smoke`, `tiny` and `small` are spec files of this shape (specs/); `posttrain spec
schema` prints the JSON Schema, `posttrain spec check FILE` validates and prints the plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.launchers import LaunchSettings, LocalLaunch
from stages.agentic.config import AgenticRecipe
from stages.common.recipe import STRICT
from stages.distill.config import DistillRecipe
from stages.evaluation.settings import AgenticEvalSettings, EvalSettings, GeneralEvalSettings, SampledEvalSettings
from stages.grpo.config import GrpoRecipe
from stages.orm.config import OrmRecipe
from stages.sft.config import SftRecipe
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
    """A local file (JSONL, Parquet) or `datasets` folder, imported as `posttrain data import` does."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    path: str = Field(..., min_length=1, description="Relative to the spec file's folder unless absolute.")
    kind: Literal["chat", "prompt", "preference"] = Field(..., alias="as")
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


# A stage's section is its own typed recipe plus what the pipeline needs to run it: the datasets it
# reads and how it is evaluated. The recipe's fields sit at the section's top level (stages.sft.max_steps).
class SftSpec(SftRecipe):
    launch: LaunchSettings | None = stage_launch()
    datasets: list[str] = dataset_refs()
    eval: EvalSettings = Field(default_factory=EvalSettings)


class ReasoningRlSpec(GrpoRecipe):
    launch: LaunchSettings | None = stage_launch()
    datasets: list[str] = dataset_refs()
    eval: SampledEvalSettings = Field(default_factory=SampledEvalSettings)


class AgenticRlSpec(AgenticRecipe):
    launch: LaunchSettings | None = stage_launch()
    datasets: list[str] = dataset_refs()
    eval: AgenticEvalSettings = Field(default_factory=AgenticEvalSettings)


class OrmSpec(OrmRecipe):
    launch: LaunchSettings | None = stage_launch()
    datasets: list[str] = dataset_refs()


class GeneralRlSpec(GrpoRecipe):
    launch: LaunchSettings | None = stage_launch()
    datasets: list[str] = dataset_refs()
    eval: GeneralEvalSettings = Field(default_factory=GeneralEvalSettings)


class DistillSpec(DistillRecipe):
    launch: LaunchSettings | None = stage_launch()
    shares: dict[Literal["reasoning_rl", "agentic_rl", "general_rl"], int] = Field(
        default_factory=dict, description="A teacher's share of each batch (default 1); teachers are the RL stages run.")


SECTION_RECIPES = {SftSpec: SftRecipe, ReasoningRlSpec: GrpoRecipe, AgenticRlSpec: AgenticRecipe, OrmSpec: OrmRecipe,
                   GeneralRlSpec: GrpoRecipe, DistillSpec: DistillRecipe}


def recipe_fields(section: BaseModel) -> dict:
    """The section's recipe as JSON, without what only the pipeline reads (datasets, eval, shares): the
    fields a stage's config is made of, and its run id's digest."""
    recipe = SECTION_RECIPES[type(section)]
    return section.model_dump(mode="json", include=set(recipe.model_fields))


class StagesSpec(BaseModel):
    """The stages to run, in pipeline order; one left out is skipped. The ORM trains before general RL."""

    model_config = STRICT
    sft: SftSpec | None = None
    reasoning_rl: ReasoningRlSpec | None = None
    agentic_rl: AgenticRlSpec | None = None
    orm: OrmSpec | None = None
    general_rl: GeneralRlSpec | None = None
    distill: DistillSpec | None = None


class PipelineSpec(BaseModel):
    model_config = STRICT
    model: ModelSource
    data: DataSpec = Field(default_factory=DataSpec)
    stages: StagesSpec
    seed: int = Field(0, description="Seed for data, model initialisation and every stage.")
    store: str | None = Field(None, description="Artifact store root; default $POSTTRAIN_STORE or ./artifacts.")
    launch: LaunchSettings = Field(default_factory=LocalLaunch, description=(
        "Where every stage's job runs unless its section says otherwise: this machine, Slurm, DeepSpeed's "
        "multi-node launcher, or Kubernetes."))

    @model_validator(mode="after")
    def _stages_have_what_they_need(self):
        if self.stages.orm is not None and self.stages.general_rl is None:
            raise ValueError("stages.orm: the ORM only serves general RL; add stages.general_rl or drop stages.orm")
        if self.stages.distill is not None and not self.teacher_stages():
            raise ValueError("stages.distill: distillation needs a teacher, an RL stage (reasoning_rl, agentic_rl "
                             "or general_rl)")
        missing = sorted(set(self.stages.distill.shares) - set(self.teacher_stages())) if self.stages.distill else []
        if missing:
            raise ValueError(f"stages.distill.shares: {', '.join(missing)} is not a stage of this spec")
        return self

    def teacher_stages(self) -> list[str]:
        return [name for name in ("reasoning_rl", "agentic_rl", "general_rl") if getattr(self.stages, name) is not None]


class SpecError(ValueError):
    """A spec that cannot be read or is not valid; the message names the file and each field's dotted path."""


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


def read_document(text: str, source: str, *, json_text: bool) -> dict:
    try:
        document = json.loads(text) if json_text else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise SpecError(f"{source}: not valid {'JSON' if json_text else 'YAML'}: {error}") from None
    if not isinstance(document, dict):
        raise SpecError(f"{source}: a spec is a mapping with model, data and stages")
    return document


def load_spec(path: str | Path) -> tuple[PipelineSpec, Path]:
    """The spec in a YAML or JSON file, and the folder its relative import paths are read from."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(f"{path}: cannot read the spec ({error})") from None
    return parse_spec(read_document(text, str(path), json_text=path.suffix == ".json"), str(path)), path.resolve().parent


def preset_path(name: str) -> Path:
    path = SPEC_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))
        raise SpecError(f"unknown pipeline preset {name!r}; known: {', '.join(known)}")
    return path


def spec_schema() -> dict:
    return PipelineSpec.model_json_schema()
