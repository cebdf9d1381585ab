"""The program the code sandbox runs to test a completion (copied into the workspace, standard library only).

    python case_runner.py solution.py calls.json results.json

It runs the completion's code, calls the named function on each call's arguments, and writes a JSON list with,
per call, the canonical JSON of what it returned (suites/code_cases.py's `canonical`), or null where the call
raised or returned something JSON cannot write. It never sees the expected values: the host compares
(rewards/code_runs.py). So code that exits early, prints or writes results of its own, tampers with this
program, or returns objects that claim to equal anything gains nothing: only the right values count.
"""

import json
import random
import sys


def returned_values(source: str, function_name: str, arguments: list[list]) -> list[str | None]:
    # The completion is untrusted and anything it does (SystemExit included) must only cost it its calls.
    namespace = {"__name__": "solution"}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
        function = namespace[function_name]
    except BaseException:
        return [None] * len(arguments)
    returned = []
    for call_arguments in arguments:
        try:
            returned.append(json.dumps(function(*call_arguments), sort_keys=True, ensure_ascii=True))
        except BaseException:
            returned.append(None)
    return returned


def main(solution_path: str, calls_path: str, results_path: str) -> None:
    with open(solution_path) as solution, open(calls_path) as calls_file:
        source, calls = solution.read(), json.load(calls_file)
    random.seed(0)  # code that draws random numbers is scored the same every time
    returned = returned_values(source, calls["function"], calls["arguments"])
    with open(results_path, "w") as results:
        json.dump(returned, results)


if __name__ == "__main__":
    main(*sys.argv[1:4])
