"""Several stage runs side by side: each checkpoint's held-out metrics before (its init checkpoint's) and after,
as the store's committed evaluations hold them (evals/), and the config fields in which the runs differ."""

from __future__ import annotations

import json
from dataclasses import dataclass

from data_contracts.lineage import Lineage
from infra.lineage import name_in_store
from infra.references import resolve_checkpoint
from infra.store import ArtifactStore

# Set per run whatever was compared: not a difference between two recipes (a stage's shared engine is
# started for it on a free port, and its URL recorded).
NOT_A_SETTING = ("run_id", "store", "output_name", "provenance", "engines.engine_urls")


@dataclass(frozen=True)
class ComparedRun:
    reference: str  # as given: sft:latest, a name, a URI
    checkpoint: str  # its name in the store
    run_id: str
    stage: str
    created_at: str
    before: dict[str, float]  # metric@mode: its init checkpoint's evaluation
    after: dict[str, float]
    settings: dict[str, object]  # the config flattened to dotted keys


def compared_runs(store: ArtifactStore, references: list[str]) -> list[ComparedRun]:
    runs = []
    for reference in references:
        name = resolve_checkpoint(store, reference, f"run {len(runs) + 1}").removeprefix(store.root_uri + "/")
        lineage = Lineage.model_validate(store.open(name).lineage())
        init = next((parent for parent in lineage.parents if parent.role == "init"), None)
        after, settings = evaluations(store, name)
        init_name = None if init is None else name_in_store(store, init)
        # The init's evaluation with the same settings where there is one; the flows evaluate an init in fewer
        # attention modes than what they trained (other settings, the same metrics), so any other one else.
        before = (evaluations(store, init_name)[0] | evaluations(store, init_name, settings)[0]) if init_name else {}
        runs.append(ComparedRun(reference, name, str(lineage.config.get("run_id", "")), lineage.name.split(" ")[0],
                                lineage.created_at.isoformat(timespec="seconds"), before, after,
                                flattened(lineage.config)))
    return runs


def evaluations(store: ArtifactStore, checkpoint: str, settings: set[str] | None = None
                ) -> tuple[dict[str, float], set[str]]:
    """The metrics ({metric@mode: value}) of the committed evaluations of `checkpoint`, those with the settings
    digests in `settings` only if given, and the digests of the settings they were run with."""
    metrics: dict[str, float] = {}
    digests: set[str] = set()
    for name in store.list_committed(f"evals/{checkpoint.rsplit('/', 1)[-1]}-"):
        evaluation = Lineage.model_validate(store.open(name).lineage())
        if name_in_store(store, evaluation.parents[0]) != checkpoint:
            continue  # another checkpoint whose name shares the prefix
        if settings is not None and evaluation.config_sha256 not in settings:
            continue
        digests.add(str(evaluation.config_sha256))
        metrics |= evaluation.eval_summary
    return metrics, digests


def differing_settings(runs: list[ComparedRun]) -> dict[str, list[object]]:
    """The dotted config keys whose values are not the same in every run, with each run's value (None: unset)."""
    keys = sorted({key for run in runs for key in run.settings
                   if not any(key == unset or key.startswith(unset + ".") for unset in NOT_A_SETTING)})
    values = {key: [run.settings.get(key) for run in runs] for key in keys}
    return {key: row for key, row in values.items() if any(value != row[0] for value in row)}


def before_after(before: float | None, after: float | None) -> str:
    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    return "-" if after is None else f"{shown(before)} → {shown(after)}"


def comparison_markdown(runs: list[ComparedRun], differing: dict[str, list[object]]) -> str:
    """The comparison as the UI shows an artifact: the metrics table, then the settings that differ."""
    def row(cells) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"

    headers = [f"{run.run_id} ({run.stage}, {run.created_at[:16].replace('T', ' ')})" for run in runs]
    lines = ["### held-out metrics, before → after", "", row(["metric", *headers]), row(["---"] * (len(runs) + 1))]
    lines += [row([name, *(before_after(run.before.get(name), run.after.get(name)) for run in runs)])
              for name in sorted({name for run in runs for name in run.after})]
    lines += ["", "### settings that differ", ""]
    if not differing:
        return "\n".join([*lines, "every setting is the same"])
    lines += [row(["field", *(run.run_id for run in runs)]), row(["---"] * (len(runs) + 1))]
    lines += [row([f"`{key}`", *(f"`{json.dumps(value, default=str)}`" for value in values)])
              for key, values in differing.items()]
    return "\n".join(lines)


def flattened(config: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat |= flattened(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
