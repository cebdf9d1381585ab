"""What a flow run's page shows of Prefect's own log lines: a cancel reads as a cancel, a form's invalid
parameters as one line.

A run cancelled from the UI reads as cancelled in its log.

When Prefect's runner cancels a flow run it sets the run Cancelling, then stops the process with SIGTERM. The
flow's engine says "Flow run was cancelled.", but the task that was running treats the signal as a crash (an
ERROR "Crash detected! Execution was aborted by a termination signal.", then "Finished in state Crashed(…)"),
and the flow's engine, which leaves the final state to the runner, ends its log with "Finished in state
Running()". The run's state is Cancelled all the same. This filter, on Prefect's run loggers, drops the crash
lines and makes the last one say Cancelled, but only once the API says the run is being cancelled: a
termination nobody asked for stays a crash.

A run whose parameters fail validation (a field out of range, warm-up longer than the steps, a reward path that
names nothing) ends before our code runs, and Prefect's engine logs it as "Engine execution exited with
unexpected exception" with its traceback. The page shows the fields and what is wrong with each, on one line.
"""

from __future__ import annotations

import logging

from prefect import get_client
from prefect.exceptions import ParameterTypeError

# What Prefect logs for a run its runner cancels, as it logs it (prefect.states, prefect.flow_engine).
ABORTED = "Execution was aborted by a termination signal."
CRASH_LINES = (f"Crash detected! {ABORTED}", f"Finished in state Crashed({ABORTED!r})")
STILL_RUNNING = "Finished in state Running()"
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class CancelledRunLogs(logging.Filter):
    def __init__(self):
        super().__init__()
        self._cancelled: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message not in (*CRASH_LINES, STILL_RUNNING) or not self._is_cancelled(getattr(record, "flow_run_id", None)):
            return True
        if message == STILL_RUNNING:
            record.msg, record.args = "Finished in state Cancelled()", ()
            return True
        return False

    def _is_cancelled(self, flow_run_id: str | None) -> bool:
        if flow_run_id is None:
            return False
        if flow_run_id not in self._cancelled:
            with get_client(sync_client=True) as client:
                state = client.read_flow_run(flow_run_id).state
            if state is None or not (state.is_cancelling() or state.is_cancelled()):
                return False
            self._cancelled.add(flow_run_id)
        return True


class InvalidParameterLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ParameterTypeError):
            # "Flow run received invalid parameters:\n - config: Value error, ..." as one line, no traceback.
            record.msg, record.args = " ".join(line.strip().removeprefix("- ") for line in str(error).splitlines()), ()
            record.exc_info = record.exc_text = None
        return True


def install() -> None:
    """Once per process: the filters on each of Prefect's run loggers."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        for kind in (CancelledRunLogs, InvalidParameterLogs):
            if not any(isinstance(existing, kind) for existing in logger.filters):
                logger.addFilter(kind())
