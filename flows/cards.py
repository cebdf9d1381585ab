"""What the Prefect UI and wandb show for a stage: a metrics table, a lineage card and the wandb run."""

from __future__ import annotations

import time

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from data_contracts.lineage import Lineage
from flows.job import stage_workdir
from flows.results import Trained
from flows.tracking import track_stage
from infra.store import open_store
from stages.common.config import StageIO


def publish_stage(stage: str, config: StageIO, trained: Trained, before: dict[str, float],
                  after: dict[str, float]) -> None:
    """The metrics table and lineage card of the trained checkpoint, and its wandb run; a stage that was
    not retrained (its output committed before) published them when it was."""
    if trained.skipped:
        return
    lineage = Lineage.model_validate(open_store(config.store).open(trained.checkpoint).lineage())
    publish_metrics_table(stage, before, after)
    publish_lineage_card(stage, trained.checkpoint, lineage)
    track_stage(stage, config, trained.history, before, after, trained.checkpoint, lineage,
                stage_workdir(config) / "wandb")


def publish_metrics_table(stage: str, before: dict[str, float], after: dict[str, float]) -> None:
    rows = [
        {"metric": name, "before": round(before.get(name, float("nan")), 4), "after": round(after[name], 4)}
        for name in sorted(after)
    ]
    create_table_artifact(table=rows, key=f"{stage}-metrics".replace("_", "-"), description=f"{stage}: held-out metrics")


def publish_retention_table(scores: dict[str, tuple[str, float, float, float]]) -> None:
    """{teacher: (metric, teacher's score, student before, student after)} as the share of each
    teacher's score the distilled student keeps."""
    rows = [{"teacher": source, "metric": metric, "teacher score": round(teacher, 4), "student before": round(before, 4),
             "student after": round(after, 4), "kept": round(after / teacher, 4) if teacher else None}
            for source, (metric, teacher, before, after) in scores.items()]
    create_table_artifact(table=rows, key="distill-retention", description="distill: what the student keeps of each teacher")


class PipelineProgress:
    """The pipeline run page's progress: the stages done of those the run has, the one running now and
    the time so far (each stage's own page has its steps, rate and time left)."""

    def __init__(self, planned: list[str]):
        self.planned, self.done, self.started = planned, [], time.monotonic()
        self.artifact_id = create_progress_artifact(progress=0.0, description=self._describe())

    def finished(self, stage: str) -> None:
        self.done.append(stage)
        update_progress_artifact(self.artifact_id, progress=100.0 * len(self.done) / max(1, len(self.planned)),
                                 description=self._describe())

    def _describe(self) -> str:
        running = next((stage for stage in self.planned if stage not in self.done), None)
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        if running is None:
            return f"pipeline: {len(self.done)} of {len(self.planned)} stages done in {minutes}m{seconds:02d}s"
        return (f"pipeline: {len(self.done)} of {len(self.planned)} stages done, now {running} "
                f"({minutes}m{seconds:02d}s so far)")


def publish_pipeline_summary(summary: dict, report_uri: str) -> None:
    """The pipeline run's page: every stage's checkpoint and its metrics before and after, in one table."""
    rows = []
    for stage in summary["stages"]:
        before, after = stage["metrics_before"], stage["metrics_after"]
        for index, name in enumerate(sorted(after)):
            rows.append({"stage": stage["stage"] if index == 0 else "", "metric": name,
                         "before": round(before.get(name, float("nan")), 4), "after": round(after[name], 4),
                         "checkpoint": stage["checkpoint"] if index == 0 else ""})
    create_table_artifact(table=rows, key="pipeline-summary",
                          description=f"run {summary['run_id']} ({summary['preset']}): every stage's held-out metrics "
                                      f"before and after, and its checkpoint; report: {report_uri}")


def publish_lineage_card(stage: str, checkpoint_uri: str, lineage: Lineage) -> None:
    lines = [
        f"## {stage}: {lineage.name}",
        f"- checkpoint: `{checkpoint_uri}`",
        f"- code: `{lineage.code.git_sha}`" + (" (dirty)" if lineage.code.dirty else ""),
        f"- config sha256: `{lineage.config_sha256}`",
        f"- seed: {lineage.seed}",
        *([f"- job: `{lineage.job}`"] if lineage.job else []),
        "",
        "| role | uri | digest |",
        "|---|---|---|",
        *(f"| {p.role} | `{p.uri}` | `{p.digest[:16]}` |" for p in lineage.parents),
        *(f"| input ({d.contract}) | `{d.uri}` | `{d.digest[:16]}` |" for d in lineage.inputs if d.role == "data"),
        *(f"| reward `{m.path}` | source | `{m.source_sha256[:16]}` |" for m in lineage.reward_modules),
        "",
        *([f"Trained on {sum(d.rows or 0 for d in rollouts):,} recorded samples in {len(rollouts)} shard(s): "
           f"`posttrain rollouts {checkpoint_uri}`", ""] if (rollouts := [d for d in lineage.inputs if d.role == "rollouts"])
          else []),
        f"Verify: `posttrain lineage {checkpoint_uri} --verify`",
    ]
    create_markdown_artifact(markdown="\n".join(lines), key=f"{stage}-lineage".replace("_", "-"),
                             description=f"{stage}: lineage card")
