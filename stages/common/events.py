"""Structured progress lines on stdout: the launcher streams them into the run log and the UI.

One line per event, `@@posttrain {json}`, so a Prefect flow, a cluster log collector or a person
tailing the log all read the same thing. Only rank 0 speaks.
"""

from __future__ import annotations

import json
import sys
import time

PREFIX = "@@posttrain "


class EventLog:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.started = time.monotonic()

    def emit(self, event: str, **fields) -> None:
        if not self.enabled:
            return
        record = {"event": event, "elapsed_s": round(time.monotonic() - self.started, 2), **fields}
        sys.stdout.write(PREFIX + json.dumps(record) + "\n")
        sys.stdout.flush()


def parse_event(line: str) -> dict | None:
    """The event of a line, also behind the `node: ` label a multi-node launcher (srun, pdsh) puts first."""
    label, found, event = line.partition(PREFIX)
    if not found or (label and not label.endswith(": ")):
        return None
    try:
        return json.loads(event)
    except json.JSONDecodeError:
        return None
