"""The learning curves on a stage run's page: a line of blocks per metric, scaled to the run's range."""

import math

from flows.curves import curves_markdown, sparkline


def test_a_falling_loss_falls_and_a_gap_shows_where_no_value_was():
    assert sparkline([3.0, 2.0, 1.0, 1.0]) == "█▅▁▁"
    assert sparkline([1.0, math.nan, 2.0]) == "▁ █"
    assert sparkline([5.0, 5.0]) == "▁▁"  # flat: no range to scale
    assert len(sparkline([float(i) for i in range(1000)], width=40)) == 40  # long runs are averaged to the width


def test_every_followed_metric_of_the_steps_is_a_row_with_its_first_lowest_highest_and_latest():
    history = [{"step": s, "loss": 1.0 / s, "reward_mean": 0.1 * s, "success/calc": 0.05 * s, "lr": 1e-4}
               for s in range(1, 11)]
    shown = curves_markdown("agentic_rl", history, 20)
    assert "steps 1–10 of 20" in shown
    rows = {line.split("|")[1].strip(): line for line in shown.splitlines() if line.startswith("| ") and "`" in line}
    assert list(rows) == ["loss", "reward_mean", "success/calc"]  # lr is not a curve anyone follows here
    assert rows["loss"].split("|")[3:7] == [" 1 ", " 0.1 ", " 1 ", " 0.1 "]


def test_the_last_step_s_expert_tokens_show_as_a_heat_strip_per_layer():
    history = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5, "expert_tokens": [[10, 30, 20, 20], [0, 40, 40, 0]]}]
    text = curves_markdown("sft", history, 2)
    assert "## expert load over the job" in text and "scale 0 – 2.00" in text
    assert "| 0 | `▃▇▅▅` | 1.50 | 0.50 | 0 |" in text
    assert "| 1 | ` ██ ` | 2.00 | 0.00 | 2 |" in text  # two experts got no token
    assert "expert load" not in curves_markdown("sft", history[:1], 2)
