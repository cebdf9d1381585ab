"""What a stage's run page shows: steps done of the total, the rate and the time left; each evaluation's
metrics in the log."""

import logging

from flows.eval_log import logged
from flows.job import progress_line


def test_progress_names_steps_rate_and_time_left():
    assert progress_line("sft", 1, 600, started=(100.0, 1), now=100.0) == "sft: step 1/600"
    assert progress_line("sft", 41, 600, started=(100.0, 1), now=180.0) == (
        "sft: step 41/600, 0.50 steps/s, about 19 min left")
    # Resumed at step 300: the rate is this job's own, not 300 steps in a few seconds.
    assert progress_line("distill", 310, 320, started=(0.0, 300), now=20.0) == (
        "distill: step 310/320, 0.50 steps/s, about 20 s left")


def test_an_evaluation_logs_its_metrics(caplog):
    metrics = {"sparse": {"arith/accuracy": 0.135, "format_validity": 0.8546}}
    with caplog.at_level(logging.INFO, logger="evaluations"):
        assert logged("file:///s/checkpoints/sft/sft-1a2b", metrics, logging.getLogger("evaluations")) is metrics
    assert caplog.messages == ["evaluation of sft-1a2b: sparse/arith/accuracy 0.135, sparse/format_validity 0.8546"]
