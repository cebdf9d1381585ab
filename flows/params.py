"""The pipeline's form: what `posttrain pipeline` takes as options and the pipeline deployment as its form."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flows.spec import SPEC_DIR, PipelineSpec, load_spec, parse_spec, preset_path
from flows.spec_reading import read_document
from flows.stage_table import STEPS
from infra.store import StoreRoot
from stages.common.recipe import Seed

# The pipeline's steps in order (the ORM is trained as part of general RL's step).
StageName = Literal[STEPS]  # type: ignore[valid-type]
# The presets: the spec files of specs/, offered as a choice.
PresetName = Literal[tuple(sorted(path.stem for path in SPEC_DIR.glob("*.yaml")))]  # type: ignore[valid-type]


class PipelineParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: PresetName = Field("tiny", description="A preset spec of specs/ (used when no spec is given).")
    # Prefect's form draws a string of format json-string as a code editor, a box that grows with its lines:
    # YAML is typed there as well (the format is the editor's hint, not a check).
    spec: str | None = Field(None, description="A pipeline spec: the path of its YAML or JSON file, or the spec "
                                               "itself as YAML or JSON text. Overrides the preset.",
                             json_schema_extra={"format": "json-string"})
    seed: Seed | None = Field(None, description="Seed for every stage; default the spec's.")
    store: StoreRoot | None = Field(None, description="Artifact store root; default the spec's, else $POSTTRAIN_STORE "
                                                "or ./artifacts.")
    reports_dir: str | None = Field(None, description="Where this machine keeps run reports (RUN_ID/summary.json, "
                                                      "report.md, LATEST); default the store's runs folder. "
                                                      "The report is committed into the store as well.")
    nproc: int | None = Field(None, ge=1, description="Trainer processes per stage for the stages that run on "
                                                       "this machine; default the spec's launch.")
    from_stage: StageName | None = Field(None, description="Start at this stage; the ones before it are not run.")
    to_stage: StageName | None = Field(None, description="Stop after this stage; the ones after it are not run.")
    init: str | None = Field(None, description="With from_stage: the committed checkpoint that stands for the "
                                               "output of the stage before it (for sft: the model SFT starts from).")

    @model_validator(mode="after")
    def _init_goes_with_from_stage(self):
        if self.init is not None and self.from_stage is None:
            raise ValueError("init is the checkpoint from_stage starts from: give from_stage too")
        if self.from_stage not in (None, STEPS[0]) and self.init is None:
            raise ValueError(f"from_stage {self.from_stage} needs init: the committed checkpoint to start from")
        if self.from_stage and self.to_stage and STEPS.index(self.to_stage) < STEPS.index(self.from_stage):
            raise ValueError(f"to_stage {self.to_stage} comes before from_stage {self.from_stage}")
        return self

    def load_spec(self) -> tuple[str, PipelineSpec, Path]:
        """(the spec's name, the spec with this run's seed and store, the folder its import paths start from)."""
        if self.spec is None:
            name, (spec, base) = self.preset, load_spec(preset_path(self.preset))
        elif "\n" in self.spec or self.spec.lstrip().startswith("{"):  # a path has no newline; JSON text opens with {
            name, base = "inline", Path.cwd()
            spec = parse_spec(read_document(self.spec, "inline spec", json_text=self.spec.lstrip().startswith("{")),
                              "inline spec")
        else:
            spec, base = load_spec(self.spec)
            name = Path(self.spec).stem
        overrides = {key: value for key, value in (("seed", self.seed), ("store", self.store)) if value is not None}
        spec = spec.model_copy(update=overrides)
        return name, spec if self.nproc is None else with_local_ranks(spec, self.nproc), base


def with_local_ranks(spec: PipelineSpec, nproc: int) -> PipelineSpec:
    """The spec with `nproc` ranks for every stage whose launch is this machine."""
    def local(launch):
        return launch.model_copy(update={"nproc": nproc}) if launch is not None and launch.kind == "local" else launch

    stages = {name: section.model_copy(update={"launch": local(section.launch)})
              for name, section in spec.stages if section is not None}
    return spec.model_copy(update={"launch": local(spec.launch), "stages": spec.stages.model_copy(update=stages)})

