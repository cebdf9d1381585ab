"""The shared frame of the hostile-input bench: a case, its outcome, and how an outcome is judged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import requests


@dataclass
class Case:
    surface: str
    what: str
    attempt: Callable[[], object]  # raises, or returns an HTTP response / CLI result / value
    names: str  # what the error must mention


@dataclass
class Outcome:
    case: Case
    verdict: str
    message: str


def judge(case: Case) -> Outcome:
    try:
        result = case.attempt()
    except Exception as error:  # every refusal is judged by its message
        message = f"{type(error).__name__}: {error}"
        return Outcome(case, "named" if case.names.lower() in message.lower() else "unnamed", message)
    if isinstance(result, requests.Response) or hasattr(result, "status_code"):
        message = f"{result.status_code} {result.text[:300]}"
        if 400 <= result.status_code < 500:
            return Outcome(case, "named" if case.names.lower() in result.text.lower() else "unnamed", message)
        return Outcome(case, "unnamed" if result.status_code >= 500 else "accepted", message)
    if hasattr(result, "exit_code"):  # a CLI run: refused means a non-zero exit and one line, no traceback
        output = result.output.strip()
        one_line = len(output.splitlines()) == 1 and "Traceback" not in output
        if result.exit_code == 0:
            return Outcome(case, "accepted", output[:300])
        return Outcome(case, "named" if one_line and case.names.lower() in output.lower() else "unnamed", output[:300])
    if getattr(result, "problems", None):  # a reward contract check that failed, with its reasons
        message = "; ".join(result.problems)
        return Outcome(case, "named" if case.names.lower() in message.lower() else "unnamed", message)
    return Outcome(case, "accepted", repr(result)[:300])
