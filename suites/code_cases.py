"""A code problem's hidden tests — calls of one function and what each must return — and how a prompt row's
`reference_answer` carries them: JSON, `{"function": NAME, "cases": [{"arguments": [...], "returns": VALUE}, ...]}`
(an swe row carries the same object as its metadata's `hidden_tests`).

Values are JSON values (tuples read back as lists). A call passes when what it returned has the same canonical
JSON as `returns` (`canonical`): types count (True is not 1, 1 is not 1.0), dict key order does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


def canonical(value: object) -> str:
    """The JSON text two values are compared by."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


@dataclass(frozen=True)
class Case:
    arguments: tuple  # positional arguments of the call
    returns: object  # what the call must return


@dataclass(frozen=True)
class FunctionCases:
    function: str  # the name the solution must define
    cases: tuple[Case, ...]

    def data(self) -> dict:
        """The cases as the JSON object a row carries: as text in a code row's reference, in an swe row's metadata."""
        return {"function": self.function,
                "cases": [{"arguments": list(case.arguments), "returns": case.returns} for case in self.cases]}

    def reference(self) -> str:
        """The row's `reference_answer`."""
        return json.dumps(self.data(), sort_keys=True)

    @classmethod
    def from_reference(cls, text: str | None) -> FunctionCases | None:
        """The cases a reference carries, None where it is not a code reference (an arith answer, an anchor reply)."""
        try:
            data = json.loads(text) if text else None
        except (ValueError, RecursionError):
            return None
        return cls.from_data(data)

    @classmethod
    def from_data(cls, data: object) -> FunctionCases | None:
        """The cases of a `data()` object, None where `data` is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("function"), str) or not data["function"].isidentifier():
            return None
        cases = data.get("cases")
        if not isinstance(cases, list) or not cases or not all(
                isinstance(case, dict) and isinstance(case.get("arguments"), list) and "returns" in case for case in cases):
            return None
        return cls(data["function"], tuple(Case(tuple(case["arguments"]), case["returns"]) for case in cases))


@dataclass(frozen=True)
class DrawnTask:
    """What one code template draws: the function to write, a solution, and the calls that test it."""

    function: str
    parameters: str  # as the signature writes them: "text", "values, size"
    task: str  # completes "Write a Python function `f(x)` that ..."
    plan: str  # the reasoning an SFT row shows before its answer
    solution: str  # the reference solution's source
    calls: tuple[tuple[tuple, object], ...]  # (arguments, expected return); the first is the prompt's example

    def cases(self) -> FunctionCases:
        return FunctionCases(self.function, tuple(Case(arguments, returns) for arguments, returns in self.calls))
