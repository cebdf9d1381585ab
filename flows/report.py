"""The run report: summary.json, report.md and PNG learning curves under <reports_dir>/<run_id>/."""

from __future__ import annotations

import json
from pathlib import Path

from data_contracts.lineage import Lineage, config_digest, current_code_version, library_versions
from infra.publish import parent_ref, publish_directory
from infra.store import ArtifactStore, CommittedArtifact


def plot_curves(stage: str, history: list[dict], out: Path) -> Path | None:
    steps = [record for record in history if "loss" in record]
    if not steps:
        return None
    # A Figure of its own draws to files only (no pyplot, no window, no global figure to close); imported
    # here, as only a finished run draws: a pipeline's start and every command that imports the flows skip it.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4))
    axis = figure.subplots()
    axis.plot([r["step"] for r in steps], [r["loss"] for r in steps], label="train loss", linewidth=1)
    rewarded = [r for r in steps if "reward_mean" in r]
    if rewarded:  # RL: the loss is a policy-gradient surrogate; the reward is what should rise
        axis.plot([r["step"] for r in rewarded], [r["reward_mean"] for r in rewarded], label="reward mean", linewidth=1)
    heldout = [r for r in steps if "heldout_loss" in r]
    if heldout:
        axis.plot([r["step"] for r in heldout], [r["heldout_loss"] for r in heldout], "o-", label="held-out loss")
    for phase in ("indexer_warmup", "sparse"):
        first = next((r["step"] for r in steps if r.get("phase") == phase), None)
        if first is not None:
            axis.axvline(first, color="grey", linestyle=":", linewidth=1)
            # Vertical labels: the two phase starts can be a few steps apart.
            axis.text(first, axis.get_ylim()[1], f"{phase} ", va="top", ha="right", rotation=90, fontsize=8,
                      color="grey")
    axis.set_xlabel("optimizer step")
    axis.set_ylabel("loss")
    axis.set_title(f"{stage}: learning curve")
    axis.legend()
    figure.tight_layout()
    path = out / f"{stage}_loss.png"
    figure.savefig(path, dpi=110)
    return path


def plot_expert_load(stage: str, history: list[dict], out: Path) -> tuple[Path, list[str]] | None:
    """The tokens each expert of each MoE layer got over the stage's job (its last step record's
    `expert_tokens`) as a layer × expert heat map of load ÷ the layer's mean, and the report's line on it."""
    tokens = next((record["expert_tokens"] for record in reversed(history) if "expert_tokens" in record), None)
    if not tokens:
        return None
    from matplotlib.figure import Figure

    loads = [[count / (sum(layer) / len(layer)) if sum(layer) else 0.0 for count in layer] for layer in tokens]
    figure = Figure(figsize=(7, 1.2 + 0.35 * len(loads)))
    axis = figure.subplots()
    image = axis.imshow(loads, aspect="auto", cmap="viridis", vmin=0)
    figure.colorbar(image, ax=axis, label="load ÷ layer mean")
    axis.set_xlabel("expert")
    axis.set_ylabel("MoE layer")
    axis.set_title(f"{stage}: expert load over the job")
    figure.tight_layout()
    path = out / f"{stage}_expert_load.png"
    figure.savefig(path, dpi=110)
    busiest = ", ".join(f"{max(layer):.2f}" for layer in loads)
    idle = ", ".join(str(sum(count == 0 for count in layer)) for layer in tokens)
    return path, [f"- expert load over the job, per MoE layer: busiest expert {busiest} × the layer's mean; "
                  f"idle experts {idle}", ""]


def _metrics_table(before: dict[str, float], after: dict[str, float], extra: dict[str, dict[str, float]]) -> list[str]:
    headers = ["metric", "before", "after", *extra]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name in sorted(after):
        cells = [name, f"{before.get(name, float('nan')):.3f}", f"{after[name]:.3f}"]
        cells += [f"{column.get(name, float('nan')):.3f}" for column in extra.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _signal_line(history: list[dict]) -> list[str]:
    """An RL stage's dynamic sampling over the run: the groups it drew, how many carried a reward spread, how
    many it trained on, and the steps that found none to train on."""
    drawn = [record for record in history if "groups_drawn" in record]
    if not drawn:
        return []
    total = {key: sum(record[key] for record in drawn) for key in ("groups_drawn", "groups_with_signal", "groups_trained")}
    idle = sum(record.get("updated") == 0 for record in drawn)
    return [f"- groups with signal: {total['groups_with_signal']:,} of {total['groups_drawn']:,} drawn; trained on "
            f"{total['groups_trained']:,}" + (f"; {idle} step(s) without a group to train on" if idle else ""), ""]


def write_report(run_dir: Path, summary: dict, histories: dict[str, list[dict]],
                 extra_columns: dict[str, dict[str, dict[str, float]]]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"# posttrain run {summary['run_id']}", "",
             f"preset `{summary['preset']}`, wall time {summary['wall_s']:.0f} s"
             + (f", {summary['engine_starts']} rollout engines started ({summary['engine_start_s']:.0f} s from launch "
                f"to answering, summed)" if "engine_starts" in summary else ""), "",
             *(f"> {note}\n" for note in summary.get("notes", []))]
    for stage in summary["stages"]:
        name = stage["stage"]
        lines += [f"## {name}", "", f"- checkpoint: `{stage['checkpoint']}`",
                  f"- wall time: {stage['wall_s']:.0f} s, of which the training job {stage['train_s']:.0f} s "
                  f"(the rest is evaluation before and after); trained tokens: {stage['train_tokens']:,}"
                  + (f"; engines started: {stage['engine_starts']} ({stage['engine_start_s']:.0f} s)"
                     if "engine_starts" in stage else ""), ""]
        if record := stage.get("rollouts"):  # the samples it trained on, and what keeping them cost
            cost = (f"; writing them took {record['record_s']:.2f} s of the job's {stage['train_s']:.0f} s "
                    f"({100 * record['record_s'] / stage['train_s']:.1f}%)" if record["record_s"] is not None
                    and stage["train_s"] else "")
            lines += [f"- rollouts on record: {record['samples']:,} samples, {record['bytes']:,} bytes{cost}", ""]
        lines += _signal_line(histories.get(name, []))
        if "retention" in stage:  # distillation: the share of each teacher's headline score the student keeps
            lines += ["- kept of each teacher's score: " + ", ".join(
                f"{teacher} {kept:.3f}" for teacher, kept in stage["retention"].items()), ""]
        lines += _metrics_table(stage["metrics_before"], stage["metrics_after"], extra_columns.get(name, {}))
        load = plot_expert_load(name, histories.get(name, []), run_dir)
        if load:
            lines += load[1]
        curve = plot_curves(name, histories.get(name, []), run_dir)
        if curve:
            lines += ["", f"![{name} learning curve]({curve.name})"]
        if load:
            lines += ["", f"![{name} expert load]({load[0].name})"]
        lines.append("")
    report = run_dir / "report.md"
    report.write_text("\n".join(lines))
    (run_dir.parent / "LATEST").write_text(summary["run_id"] + "\n")
    return report


def commit_report(store: ArtifactStore, run_dir: Path, summary: dict) -> CommittedArtifact:
    """The report's folder committed into the run's own store as `reports/<run_id>`, each stage's
    checkpoint a parent: whoever reads the store reads the report with it."""
    checkpoints = [store.open(stage["checkpoint"]) for stage in summary["stages"]]
    config = {key: summary[key] for key in ("preset", "seed", "from_stage", "to_stage")}
    lineage = Lineage(kind="report", name=f"run {summary['run_id']}", config=config, config_sha256=config_digest(config),
                      parents=[parent_ref(checkpoint, "evaluated") for checkpoint in checkpoints], seed=summary["seed"],
                      code=current_code_version(), libraries=library_versions(), triggered_by="posttrain pipeline")
    return publish_directory(store, f"reports/{summary['run_id']}", run_dir, lineage)
