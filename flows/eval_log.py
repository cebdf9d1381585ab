"""An evaluation's metrics in its run's log: the run page shows what was measured, not only "Completed()"."""

from __future__ import annotations

from prefect import get_run_logger


def flat(metrics: dict, prefix: str = "") -> dict[str, float]:
    """{"sparse": {"arith/accuracy": 0.1}} → {"sparse/arith/accuracy": 0.1}."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}/")
        else:
            out[f"{prefix}{key}"] = value
    return out


def logged(checkpoint: str, metrics: dict, logger=None) -> dict:
    """`metrics` (returned unchanged), logged as one line naming the evaluated checkpoint (to the run's log
    unless `logger` is given)."""
    shown = ", ".join(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                      for name, value in flat(metrics).items())
    (logger or get_run_logger()).info(f"evaluation of {checkpoint.rstrip('/').rsplit('/', 1)[-1]}: {shown}")
    return metrics
