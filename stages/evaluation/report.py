"""Per-example results → a flat metrics dict, and the metrics as eval@1 rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from stages.evaluation.arith_accuracy import ArithResult
from stages.evaluation.search_episodes import EvalEpisode
from suites.search import UNKNOWN

# The suite name eval@1 rows carry for metrics pooled over every suite's turns.
ALL_SUITES = "all"


@dataclass(frozen=True)
class EvalReport:
    # "suite/metric" for one suite, a bare name for a metric pooled over all turns.
    metrics: dict[str, float]
    # How many examples (problems, episodes or turns) each metric averages over.
    counts: dict[str, int]
    arith: list[ArithResult] = field(repr=False)
    search: list[EvalEpisode] = field(repr=False)


def summarize(arith: Sequence[ArithResult], search: Sequence[EvalEpisode]) -> EvalReport:
    """Fractions of examples; a metric with nothing to average over is left out rather than NaN."""
    metrics: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(name: str, outcomes: Sequence[bool]) -> None:
        if outcomes:
            metrics[name], counts[name] = sum(outcomes) / len(outcomes), len(outcomes)

    search_turns = [turn for episode in search for turn in episode.turns]
    arith_turns = [r.turn for r in arith]
    # The suite is posed as reasoning (a step-by-step trace), so its accuracy is the thinking-on one;
    # the same problems answered with thinking off are scored on their own.
    add("arith/accuracy", [r.correct for r in arith if r.turn.thinking])
    add("arith/accuracy_thinking_off", [r.correct for r in arith if not r.turn.thinking])
    for level in sorted({r.level for r in arith}):  # where the headroom for reasoning RL is
        add(f"arith/accuracy_level_{level}", [r.correct for r in arith if r.turn.thinking and r.level == level])
    add("arith/format_validity", [r.format_valid for r in arith])
    add("arith/thinking_compliance", [turn.thinking_compliant for turn in arith_turns])
    add("search/success", [episode.success for episode in search])
    # Without the questions whose answer is "unknown": a model that never finds anything scores 0 here.
    add("search/success_answerable", [episode.success for episode in search if episode.state.reference != UNKNOWN])
    add("search/format_validity", [turn.format_valid for turn in search_turns])
    add("search/thinking_compliance", [turn.thinking_compliant for turn in search_turns])
    # Pooled over every generated turn; an arith turn's validity includes its answer's format.
    add("format_validity", [r.format_valid for r in arith] + [t.format_valid for t in search_turns])
    add("thinking_compliance", [turn.thinking_compliant for turn in arith_turns + search_turns])
    return EvalReport(metrics, counts, list(arith), list(search))


def eval_rows(report: EvalReport, checkpoint_uri: str, split: str, created_at: str | None = None) -> list[dict]:
    """One eval@1 row per metric; pooled metrics get the suite name "all"."""
    created_at = created_at or datetime.now(UTC).isoformat(timespec="seconds")
    rows = []
    for name, value in report.metrics.items():
        suite, _, metric = name.rpartition("/")
        rows.append({
            "checkpoint_uri": checkpoint_uri, "suite": suite or ALL_SUITES, "metric": metric, "split": split,
            "value": float(value), "n": report.counts[name], "created_at": created_at,
        })
    return rows
