"""What a stage's job leaves and what a stage flow returns: the pipeline reads every stage's result the
same way, whatever the stage."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trained:
    """A stage job's outcome: its final checkpoint, its per-step history and the job's wall time.
    `skipped`: the checkpoint was committed for this config, inputs and code before, and no job ran."""

    checkpoint: str
    history: list[dict]
    train_s: float
    skipped: bool = False


@dataclass(frozen=True)
class StageResult:
    """A stage flow's result: the trained checkpoint and its held-out metrics before and after training."""

    trained: Trained
    metrics_before: dict[str, float]
    metrics_after: dict[str, float]
    # SFT: the trained checkpoint measured with dense attention too, which shows what sparsity costs.
    metrics_after_dense: dict[str, float] | None = None
    # Distillation: each teacher's score on its own domain ("teacher/metric"), and the share of each
    # teacher's headline score the student keeps.
    teacher_scores: dict[str, float] | None = None
    retention: dict[str, float] | None = None

    @property
    def checkpoint(self) -> str:
        return self.trained.checkpoint

    def report_columns(self) -> dict[str, dict[str, float]]:
        """The run report's metric columns beside before and after, by heading."""
        columns = {"after (dense attention)": self.metrics_after_dense, "teacher": self.teacher_scores}
        return {heading: metrics for heading, metrics in columns.items() if metrics is not None}
