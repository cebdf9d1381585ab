"""Seconds from Submit to the first logged training step, as a training lead sees it in the UI.

Creates a run of a deployed stage (what the UI's Run form does: POST create_flow_run with the form's
parameters) and follows the run's log through the API until the first `step` line appears; prints the
time to the job's start line, to the first step and to the run's end. Run it against `posttrain ui`
(or any server whose deployments are served), once per launcher:

    .venv/bin/python bench/submit_to_first_step.py --api http://127.0.0.1:4200/api --config sft.json \\
        [--launch '{"kind": "slurm", "nodes": 2, "partition": "debug"}'] [--datasets-by-suite '{"arith": URI}']

`--config` is the stage's form as JSON (the flow's `config` parameter); `--launch` replaces its launch
section. The run id gets a fresh suffix (and the output its default name) so every measurement trains.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import time
from pathlib import Path

import requests

# The flow logs a stage's first step, every tenth and each held-out one: "sft step 1/40 loss 5.1234".
STEP_LINE = re.compile(r"\w step \d+/\d+ loss ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", required=True, help="the Prefect API (PREFECT_API_URL)")
    parser.add_argument("--deployment", default="sft/sft", help="FLOW/DEPLOYMENT")
    parser.add_argument("--config", required=True, type=Path, help="the stage's form (config parameter) as JSON")
    parser.add_argument("--launch", default=None, help="a launch section as JSON, replacing the config's")
    parser.add_argument("--datasets-by-suite", default=None, help="the SFT flow's evaluation suites as JSON")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    config = json.loads(args.config.read_text())
    config["run_id"] = f"{config.get('run_id') or 'bench'}-{secrets.token_hex(3)}"
    config["output_name"] = ""  # the new run id's own: nothing of an earlier measurement is reused
    if args.launch:
        config["launch"] = json.loads(args.launch)
    parameters = {"config": config}
    if args.datasets_by_suite:
        parameters["datasets_by_suite"] = json.loads(args.datasets_by_suite)
    flow_name, deployment_name = args.deployment.split("/")
    deployment = get(args.api, f"/deployments/name/{flow_name}/{deployment_name}")

    submitted = time.monotonic()
    run = post(args.api, f"/deployments/{deployment['id']}/create_flow_run", {"parameters": parameters})
    marks: dict[str, float] = {}
    while time.monotonic() - submitted < args.timeout:
        messages = [log["message"] for log in post(args.api, "/logs/filter", {
            "logs": {"flow_run_id": {"any_": [run["id"]]}}, "sort": "TIMESTAMP_ASC", "limit": 200})]
        now = time.monotonic() - submitted
        if "job_started" not in marks and any(" started (" in m and ": job " in m for m in messages):
            marks["job_started"] = now
        if "first_step" not in marks and any(STEP_LINE.search(m) for m in messages):
            marks["first_step"] = now
        state = get(args.api, f"/flow_runs/{run['id']}")["state"]["type"]
        if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            marks["ended"] = now
            break
        time.sleep(0.25)
    print(json.dumps({"deployment": args.deployment, "launch": config.get("launch", {"kind": "local"}),
                      "flow_run": run["id"], "state": state,
                      **{f"{name}_s": round(value, 1) for name, value in marks.items()}}, indent=2))


def get(api: str, path: str) -> dict:
    response = requests.get(api + path, timeout=30)
    response.raise_for_status()
    return response.json()


def post(api: str, path: str, body: dict):
    response = requests.post(api + path, json=body, timeout=30)
    response.raise_for_status()
    return response.json()


if __name__ == "__main__":
    main()
