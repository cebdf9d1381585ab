"""The pipeline's first task: the data and the initial checkpoint every stage reads, committed and resolved."""

from __future__ import annotations

import tempfile
from functools import cache, partial
from pathlib import Path

from prefect import task

from data_contracts import CHAT_V1, PREFERENCE_V1, PROMPT_V1
from data_prep.harbor_import import import_harbor
from data_prep.import_data import ImportFailed, import_dataset
from data_prep.prepare import import_checkpoint, prepare, publish_preferences, publish_prompts, publish_suite
from flows.spec import ImportSpec, PipelineSpec, SpecError
from flows.stage_table import BY_NAME
from infra.references import resolve_checkpoint, resolve_dataset
from infra.store import open_store
from model.checks import ModelCheckError
from suites.prepare import TASK_ROW_SUITES


@task
def prepare_data(spec: PipelineSpec, base: Path, triggered_by: str = "posttrain pipeline") -> dict:
    """Publish the spec's embedded suites, import its local files, make or find the initial checkpoint,
    and resolve every stage's datasets to committed URIs: {"stages": {stage: [uri]}, "evaluated": {name:
    uri} (the chat data SFT is evaluated on), "init_checkpoint": uri}. A reference that names nothing
    committed fails here, naming its field, before any stage starts."""
    store = open_store(spec.store)
    with tempfile.TemporaryDirectory(prefix="posttrain-prepare-") as workdir:
        imported = {name: import_spec(store, name, entry, base, spec.seed, triggered_by)
                    for name, entry in spec.data.imports.items()}
        suites = dict(spec.data.suites)
        if spec.model.preset is not None:
            corpus = tuple(store.open(imported[name]) for name, entry in spec.data.imports.items() if entry.kind == "chat")
            prepared = prepare(store, suites=list(suites), sizes=suites, preset=spec.model.preset, seed=spec.seed,
                               triggered_by=triggered_by, corpus=corpus)
            chat = {suite: artifact.uri for suite, artifact in prepared.datasets.items()}
            init = prepared.init_checkpoint.uri
        else:
            chat = {suite: publish_suite(store, suite, sizes, spec.seed, Path(workdir), triggered_by)[0].uri
                    for suite, sizes in suites.items()}
            init = (import_model(store, spec, base, triggered_by) if spec.model.path is not None
                    else resolve_checkpoint(store, spec.model.checkpoint, "model.checkpoint"))
        # An embedded suite stands for the data of the contract the stage reads it as (cached: stages share them).
        publishers = {CHAT_V1.id: lambda suite: chat[suite],
                      PROMPT_V1.id: cache(lambda suite: publish_prompts(store, suite, suites[suite], spec.seed,
                                                                        Path(workdir), triggered_by)[0].uri),
                      PREFERENCE_V1.id: lambda suite: publish_preferences(store, suite, suites[suite], spec.seed,
                                                                          Path(workdir), triggered_by)[0].uri}

        def resolve(stage: str, index: int, reference: str) -> str:
            if reference in suites:
                return publishers[BY_NAME[stage].config.suite_contract(reference).id](reference)
            if reference in imported:
                return imported[reference]
            return resolve_dataset(store, reference, f"stages.{stage}.datasets[{index}]")

        named = {stage: {ref: resolve(stage, i, ref) for i, ref in enumerate(section.datasets)}
                 for stage, section in spec.stages if section is not None and hasattr(section, "datasets")}
        # A code task's suite that SFT trains on is evaluated by playing its held-out episodes: from its task rows.
        played = {suite: publishers[PROMPT_V1.id](suite) for suite in named.get("sft", {}) if suite in TASK_ROW_SUITES}
    return {"stages": {stage: sorted(uris.values()) for stage, uris in named.items()},
            "evaluated": chat | named.get("sft", {}) | played, "init_checkpoint": init}


def import_model(store, spec: PipelineSpec, base: Path, triggered_by: str) -> str:
    path = base / spec.model.path
    try:
        return import_checkpoint(store, path, spec.seed, triggered_by).uri
    except ModelCheckError as error:
        raise SpecError(f"model.path: {error}") from None


def import_spec(store, name: str, entry: ImportSpec, base: Path, seed: int, triggered_by: str) -> str:
    path = base / entry.path
    importer = import_harbor if entry.kind == "harbor" else partial(import_dataset, kind=entry.kind)
    try:
        imported = importer(store, path, name=name, test_fraction=entry.test_fraction,
                            skip_bad_rows=entry.skip_bad_rows, seed=seed, triggered_by=triggered_by)
    except ImportFailed as error:
        raise SpecError(f"data.imports.{name}: {error}") from None
    if imported.rejected:
        print(f"data.imports.{name}: {imported.rejected} bad rows skipped, listed in {imported.rejects_file}")
    return imported.dataset.uri
