"""A stage's learning curves on its run's page in the UI, updated as it trains: one row per metric (loss,
reward, held-out loss, ...), its curve over the steps so far as a line of block characters, with the first,
lowest, highest and latest values. Markdown the UI renders as it is: no image to host, no script to run."""

from __future__ import annotations

import math

from prefect.artifacts import create_markdown_artifact

# What a step record may carry that a person follows over a run, in the order they are shown; a name ending
# in "/" stands for every metric under it (agentic RL's success per task, distillation's KL per teacher).
CURVES = ("loss", "reward_mean", "success/", "reverse_kl", "kl/", "heldout_loss", "heldout_accuracy",
          "train_accuracy", "grad_norm", "clip_fraction", "pop_masked_fraction", "expert_load_max_over_mean")
BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 60


def sparkline(values: list[float], width: int = WIDTH) -> str:
    """`values` as one character each (the means of about len/width consecutive values when there are more):
    the lowest the lowest block, the highest the highest; a gap where there is no finite value."""
    buckets = [values[len(values) * i // width:len(values) * (i + 1) // width] for i in range(width)] \
        if len(values) > width else [[value] for value in values]
    means = [_finite_mean(bucket) for bucket in buckets]
    finite = [mean for mean in means if mean is not None]
    if not finite:
        return " " * len(means)
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    return "".join(" " if mean is None else BLOCKS[min(int((mean - low) / span * len(BLOCKS)), len(BLOCKS) - 1)]
                   for mean in means)


def curves_markdown(stage: str, history: list[dict], total: int | None) -> str:
    steps = [event["step"] for event in history]
    shown = f"steps {steps[0]}–{steps[-1]}" + (f" of {total}" if total else "") if steps else "no step yet"
    lines = [f"# {stage}: learning curves", "", f"{shown}", "",
             "| metric | curve | first | lowest | highest | latest |", "|---|---|---|---|---|---|"]
    for metric in _shown_metrics(history):
        values = [float(event[metric]) for event in history if isinstance(event.get(metric), int | float)]
        finite = [value for value in values if math.isfinite(value)]
        if finite:
            lines.append(f"| {metric} | `{sparkline(values)}` | {finite[0]:.4g} | {min(finite):.4g} | "
                         f"{max(finite):.4g} | {finite[-1]:.4g} |")
    tokens = history[-1].get("expert_tokens") if history else None
    return "\n".join(lines + (expert_load_lines(tokens) if tokens else [])) + "\n"


def expert_load_lines(tokens: list[list[int]]) -> list[str]:
    """The job's tokens per MoE layer and expert (the last step's `expert_tokens`) as a heat strip per layer: one
    block per expert, its load ÷ the layer's mean on one scale for every layer, a blank for an expert that got none."""
    loads = [[count / (sum(layer) / len(layer)) if sum(layer) else 0.0 for count in layer] for layer in tokens]
    top = max(max(layer) for layer in loads) or 1.0
    lines = ["", "## expert load over the job", "", "tokens ÷ the layer's mean, one block per expert (scale 0 – "
             f"{top:.2f}; a blank: no token)", "", "| MoE layer | experts | busiest | least | idle |", "|---|---|---|---|---|"]
    for index, layer in enumerate(loads):
        strip = "".join(" " if load == 0 else BLOCKS[min(int(load / top * len(BLOCKS)), len(BLOCKS) - 1)]
                        for load in layer)
        lines.append(f"| {index} | `{strip}` | {max(layer):.2f} | {min(layer):.2f} | {layer.count(0.0)} |")
    return lines


def publish_curves(stage: str, history: list[dict], total: int | None) -> None:
    """A new version of the stage's curves artifact (one key per stage: the UI shows the newest)."""
    create_markdown_artifact(markdown=curves_markdown(stage, history, total), key=f"{stage.replace('_', '-')}-curves",
                             description=f"{stage}: learning curves")


def _finite_mean(values: list[float]) -> float | None:
    finite = [value for value in values if math.isfinite(value)]
    return sum(finite) / len(finite) if finite else None


def _shown_metrics(history: list[dict]) -> list[str]:
    present = sorted({key for event in history for key in event})
    return [key for curve in CURVES for key in ([curve] if not curve.endswith("/") else
                                                 [k for k in present if k.startswith(curve)])]
