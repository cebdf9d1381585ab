"""The program the code sandbox runs to call a module's function on test arguments (copied into the workspace,
standard library only).

    python case_runner.py MODULE.py calls.json results.json

It runs MODULE.py's code (as the module MODULE), calls the function calls.json names on each call's arguments, and
writes a JSON list with, per call, the canonical JSON of what it returned (suites/code_cases.py's `canonical`), or
null where the call raised or returned something JSON cannot write. It never sees the expected values: the host
compares (rollout/agents/envs/case_runs.py). So code that exits early, prints or writes results of its own, tampers
with this program, or returns objects that claim to equal anything gains nothing: only the right values count.
"""

import json
import os
import random
import sys


def returned_values(source: str, path: str, function_name: str, arguments: list[list]) -> list[str | None]:
    # The code is untrusted and anything it does (SystemExit included) must only cost it its calls.
    namespace = {"__name__": os.path.basename(path).removesuffix(".py"), "__file__": path}
    try:
        exec(compile(source, path, "exec"), namespace)
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


def main(module_path: str, calls_path: str, results_path: str) -> None:
    with open(module_path) as module, open(calls_path) as calls_file:
        source, calls = module.read(), json.load(calls_file)
    random.seed(0)  # code that draws random numbers is tested the same every time
    returned = returned_values(source, module_path, calls["function"], calls["arguments"])
    with open(results_path, "w") as results:
        json.dump(returned, results)


if __name__ == "__main__":
    main(*sys.argv[1:4])
