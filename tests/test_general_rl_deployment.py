"""A researcher swaps general RL's reward module from the UI: `posttrain ui` serves the deployed flow, and a
run is created through Prefect's REST API, as the UI's Run form does. The server takes a password, as one
a cluster exposes must: without it the API answers 401."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from data_prep.prepare import publish_prompts
from infra.ports import free_port
from infra.store import open_store
from suites.prepare import SuiteSizes
from tests.sft_fixtures import run_sft, small_config

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
AUTH = ("lead", "s3cret-for-tests")


class Brevity:
    """A stand-in for a researcher's own module: 1 for replies under 40 characters."""

    name, version = "brevity", "7"

    def __call__(self, samples):
        return [float(len(s.response) < 40) for s in samples]


@pytest.fixture(scope="module")
def served(tmp_path_factory, small_store):
    """`posttrain ui`, as a training lead starts it: a real Prefect server on 127.0.0.1 with the UI, and
    the deployments executing the runs created for them."""
    workdir = tmp_path_factory.mktemp("served")
    port = free_port("127.0.0.1")
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "POSTTRAIN_WORKDIR": str(workdir / "work"), "POSTTRAIN_STORE": small_store["root"],
           "PYTHONPATH": str(REPO)}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_HOME", None)  # `posttrain ui` keeps its database under the working directory
    with (workdir / "ui.log").open("wb") as log:
        ui = subprocess.Popen([sys.executable, "-m", "posttrain.cli", "ui", "--port", str(port), "--only", "general_rl",
                               "--logs", str(workdir / "logs"), "--auth-string", ":".join(AUTH)],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield api, _deployment_id(api, "general_rl/general_rl", ui, workdir / "ui.log")
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200  # the UI itself is served
        assert (workdir / "work" / "prefect" / "prefect.db").is_file()  # its own database, not ~/.prefect's
    finally:
        ui.send_signal(signal.SIGINT)  # as Ctrl-C: the command stops its server and deployments
        assert ui.wait(timeout=120) == 0


def _deployment_id(api: str, name: str, server: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + 300  # a new server migrates its database first
    while time.monotonic() < deadline:
        assert server.poll() is None, f"posttrain ui exited: {log.read_text()[-2000:]}"
        try:
            answer = requests.get(f"{api}/deployments/name/{name}", timeout=10, auth=AUTH)
        except requests.ConnectionError:  # the server is still starting
            answer = None
        if answer is not None and answer.status_code == 200:
            return answer.json()["id"]
        time.sleep(1)
    raise TimeoutError(f"deployment {name} never registered: {log.read_text()[-2000:]}")


def _retrying_503(request, attempts: int = 6):
    """Prefect answers 503 to an error its clients should retry (SQLite busy under load), and its own
    client retries them; so does a script that calls the API as the UI does."""
    for attempt in range(attempts):
        response = request()
        if response.status_code != 503:
            return response
        time.sleep(0.5 * 2**attempt)
    return response


def _finished_state(api: str, run_id: str) -> dict:
    deadline, state = time.monotonic() + 600, None
    while time.monotonic() < deadline:
        state = _retrying_503(lambda: requests.get(f"{api}/flow_runs/{run_id}", timeout=10, auth=AUTH)).json()["state"]
        if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return state
        time.sleep(2)
    raise TimeoutError(f"flow run {run_id} still {state}")


def test_a_run_created_through_the_api_uses_the_reward_module_its_form_names(served, small_store, tmp_path):
    """The form's fields hold what a person types: `sft:latest`, a dataset's name, no URIs; the lineage
    records the URIs they resolved to."""
    api, deployment = served
    store = open_store(small_store["root"])
    with tempfile.TemporaryDirectory() as workdir:
        prompts, _ = publish_prompts(store, "instruct", SuiteSizes(40, 8), 0, Path(workdir), "tests")
    run_sft(small_config(small_store, "sft-for-the-form", max_steps=2, heldout={"every": 2, "samples": 4},
                         dsa={"dense_steps": 1, "indexer_warmup_steps": 1}), tmp_path)
    sft = store.open("checkpoints/sft/sft-for-the-form")
    config = {"run_id": "general-from-ui", "store": small_store["root"], "init_checkpoint": "sft:latest",
              "datasets": ["instruct-prompts:latest"], "group_size": 2, "prompts_per_step": 2, "max_steps": 2,
              "sampling": {"max_new_tokens": 12}, "optimizer": {"warmup_steps": 1},
              "rewards": [{"path": f"{__name__}.Brevity", "weight": 1.0}]}
    # The call the UI's Run form makes: the deployment's parameters, edited, as JSON.
    run = {"parameters": {"config": config, "eval_settings": {"prompts_per_dataset": 4, "max_new_tokens": 12}}}
    refused = requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30, json=run)
    assert refused.status_code == 401
    created = _retrying_503(lambda: requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30,
                                                  json=run, auth=AUTH))
    assert created.status_code == 201, created.text
    state = _finished_state(api, created.json()["id"])
    assert state["type"] == "COMPLETED", state
    # Listed in the UI by the run_id typed into the form, not by Prefect's random words.
    run = _retrying_503(lambda: requests.get(f"{api}/flow_runs/{created.json()['id']}", timeout=10, auth=AUTH)).json()
    assert run["name"] == config["run_id"]
    # Its page carries the learning curves, last updated when training ended.
    artifacts = _retrying_503(lambda: requests.post(f"{api}/artifacts/filter", timeout=10, auth=AUTH, json={
        "artifacts": {"flow_run_id": {"any_": [created.json()["id"]]}, "key": {"any_": ["general-rl-curves"]}},
        "sort": "CREATED_DESC"})).json()
    assert artifacts and "| loss | `" in artifacts[0]["data"] and "steps 1–2" in artifacts[0]["data"]
    assert "## expert load over the job" in artifacts[0]["data"]  # the MoE layers' load, a strip per layer

    lineage = store.open(f"checkpoints/general_rl/{config['run_id']}").lineage()
    (module,) = lineage["reward_modules"]
    assert module["path"] == f"{__name__}.Brevity" and module["params"]["version"] == "7"
    assert module["source_sha256"] and lineage["prefect"]["deployment_id"] == deployment
    assert lineage["parents"][0]["uri"] == sft.uri and [i["uri"] for i in lineage["inputs"] if i["role"] == "data"] == [prompts.uri]


def test_the_forms_offer_the_checkpoints_and_datasets_the_store_holds_as_commits_land(served):
    api, deployment = served
    deadline = time.monotonic() + 90  # the forms are rewritten within 15 s of a commit

    def pickers() -> tuple[dict, dict]:
        schema = _retrying_503(lambda: requests.get(f"{api}/deployments/{deployment}", timeout=10,
                                                    auth=AUTH)).json()["parameter_openapi_schema"]
        fields = schema["definitions"]["GeneralRlConfig"]["properties"]
        return fields["init_checkpoint"], fields["datasets"]

    while True:
        checkpoint, datasets = pickers()
        offered = checkpoint.get("anyOf", [{}])[0].get("enum", [])
        if {"sft:latest", "general_rl:latest"} <= set(offered) or time.monotonic() > deadline:  # the first test's
            break
        time.sleep(2)
    assert {"init:latest", "sft:latest", "checkpoints/sft/sft-for-the-form", "general_rl:latest"} <= set(offered)
    assert checkpoint["anyOf"][1] == {"title": "a URI or name", "type": "string", "minLength": 1}  # free text stays
    assert "In the store: " in checkpoint["description"] and "sft:latest: sft, " in checkpoint["description"]
    assert "instruct-prompts:latest" in datasets["anyOf"][0]["items"]["enum"]


def test_the_form_draws_optional_fields_as_their_type_and_refuses_a_wrong_one_by_its_rule(served, small_store):
    api, deployment = served
    schema = _retrying_503(lambda: requests.get(f"{api}/deployments/{deployment}", timeout=10,
                                                auth=AUTH)).json()["parameter_openapi_schema"]
    assert '"type": "null"' not in json.dumps(schema)  # no field opens on a None button
    config = {"store": small_store["root"], "init_checkpoint": "init:latest", "datasets": ["instruct-prompts:latest"],
              "compute": {"micro_batch_size": -2}}
    refused = _retrying_503(lambda: requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30,
                                                  json={"parameters": {"config": config}}, auth=AUTH))
    assert refused.status_code == 409, refused.text
    assert "'config.compute.micro_batch_size'" in refused.text and "-2 is less than the minimum of 1" in refused.text


def test_a_comparison_of_runs_is_published_to_the_ui(served, small_store):
    """`posttrain runs compare --publish`: the first test's runs side by side on the UI's Artifacts page."""
    api, _ = served
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_API_AUTH_STRING": ":".join(AUTH)}
    shown = subprocess.run([sys.executable, "-m", "posttrain.cli", "runs", "compare", "checkpoints/sft/sft-for-the-form",
                            "checkpoints/general_rl/general-from-ui", "--store", small_store["root"], "--publish"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    (artifact,) = _retrying_503(lambda: requests.post(f"{api}/artifacts/filter", timeout=10, auth=AUTH, json={
        "artifacts": {"key": {"any_": ["runs-compare"]}}, "sort": "CREATED_DESC", "limit": 1})).json()
    assert artifact["type"] == "markdown" and "sft-for-the-form, general-from-ui" in artifact["description"]
    assert "| metric | sft-for-the-form (sft, " in artifact["data"] and " → " in artifact["data"]
    unset = {key: value for key, value in env.items() if key != "PREFECT_API_URL"}
    refused = subprocess.run([sys.executable, "-m", "posttrain.cli", "runs", "compare", "sft:latest", "sft:latest",
                              "--store", small_store["root"], "--publish"], cwd=REPO, env=unset, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "--publish needs PREFECT_API_URL" in refused.stderr


def test_a_misspelled_reward_path_fails_before_any_task_naming_its_field(served, small_store):
    api, deployment = served
    config = {"run_id": "general-misspelled", "store": small_store["root"], "init_checkpoint": "init:latest",
              "datasets": ["instruct-prompts:latest"], "rewards": [{"path": "rewards.verifiers.ArithExactMatc"}]}
    created = _retrying_503(lambda: requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30,
                                                  json={"parameters": {"config": config}}, auth=AUTH))
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    state = _finished_state(api, run_id)
    assert state["type"] == "FAILED" and "rewards[0].path" in state["message"], state
    assert "ArithExactMatc" in state["message"] and "Traceback" not in state["message"]
    # Its body never ran, yet it is listed by the run_id typed into its form.
    named = _retrying_503(lambda: requests.get(f"{api}/flow_runs/{run_id}", timeout=10, auth=AUTH)).json()["name"]
    assert named == config["run_id"]
    tasks = _retrying_503(lambda: requests.post(f"{api}/task_runs/filter", timeout=10, auth=AUTH,
                                                json={"flow_runs": {"id": {"any_": [run_id]}}})).json()
    assert tasks == []  # no input check, engine or job was started
    # Its page's log says so in one line, without the engine's traceback.
    time.sleep(3)  # the run's last log lines
    lines = _logs(api, run_id)
    assert any("Flow run received invalid parameters: config.rewards" in line and "ArithExactMatc" in line
               for line in lines), lines
    assert not any("Traceback" in line for line in lines), lines


def test_a_run_cancelled_from_the_ui_ends_cancelled_and_says_so(served, small_store):
    api, deployment = served
    with tempfile.TemporaryDirectory() as workdir:
        publish_prompts(open_store(small_store["root"]), "instruct", SuiteSizes(40, 8), 0, Path(workdir), "tests")
    # Its own init: init:latest is whichever initial checkpoint other tests committed last (one has NaN weights).
    config = {"run_id": "general-cancelled", "store": small_store["root"], "init_checkpoint": small_store["init"],
              "datasets": ["instruct-prompts:latest"], "group_size": 2, "prompts_per_step": 2, "max_steps": 10_000,
              "sampling": {"max_new_tokens": 12}, "optimizer": {"warmup_steps": 1},
              "rewards": [{"path": f"{__name__}.Brevity", "weight": 1.0}]}
    run = {"parameters": {"config": config, "eval_settings": {"prompts_per_dataset": 4, "max_new_tokens": 12}}}
    created = _retrying_503(lambda: requests.post(f"{api}/deployments/{deployment}/create_flow_run", timeout=30,
                                                  json=run, auth=AUTH))
    run_id = created.json()["id"]
    deadline = time.monotonic() + 300
    while not any("general_rl step" in line for line in _logs(api, run_id)):  # training: a job and engines to stop
        state = _retrying_503(lambda: requests.get(f"{api}/flow_runs/{run_id}", timeout=10, auth=AUTH)).json()["state"]
        assert time.monotonic() < deadline and state["type"] in ("SCHEDULED", "PENDING", "RUNNING"), \
            (state.get("message"), _logs(api, run_id)[-20:])
        time.sleep(2)
    # What the UI's Cancel button does.
    cancelled = _retrying_503(lambda: requests.post(f"{api}/flow_runs/{run_id}/set_state", timeout=10, auth=AUTH,
                                                    json={"state": {"type": "CANCELLING"}, "force": True}))
    assert cancelled.status_code in (200, 201), cancelled.text
    state = _finished_state(api, run_id)
    time.sleep(3)  # the run's last log lines
    lines = _logs(api, run_id)
    assert state["type"] == "CANCELLED", (state, lines[-20:])
    assert not any("Crash detected" in line or "Finished in state Running" in line for line in lines), "\n".join(lines[-25:])
    assert "Flow run was cancelled." in lines and "Finished in state Cancelled()" in lines, lines[-5:]


def _logs(api: str, run_id: str) -> list[str]:
    found = _retrying_503(lambda: requests.post(f"{api}/logs/filter", timeout=10, auth=AUTH, json={
        "logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC", "limit": 200}))
    return [entry["message"] for entry in found.json()]
