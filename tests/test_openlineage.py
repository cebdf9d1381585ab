"""A stage run's OpenLineage events: to the events file always, to the endpoint OpenLineage's own settings name
when an operator sets them, valid by the spec, and saying what the checkpoint's lineage.json says."""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from data_contracts.lineage import Lineage, RewardModuleRef
from infra.openlineage import StageRunEvents
from infra.publish import data_input, parent_ref, publish_directory
from infra.store import open_store
from tests.openlineage_checks import check_complete_event, read_events, validate_event


@pytest.fixture
def lineage_server():
    """A real HTTP endpoint in OpenLineage's shape (POST /api/v1/lineage); what it received."""
    received = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, self.headers.get("Authorization"), body))
            self.send_response(201)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


def committed(store, name, tmp_path, lineage):
    folder = tmp_path / name.replace("/", "-")
    folder.mkdir()
    (folder / "weights.bin").write_bytes(name.encode())
    return publish_directory(store, name, folder, lineage)


def test_stage_runs_go_to_the_file_and_the_operators_endpoint_as_their_lineage_says(tmp_path, monkeypatch, lineage_server):
    url, received = lineage_server
    monkeypatch.setenv("OPENLINEAGE_URL", url)
    monkeypatch.setenv("OPENLINEAGE_API_KEY", "lineage-token")
    monkeypatch.setenv("POSTTRAIN_OPENLINEAGE_FILE", str(tmp_path / "events.jsonl"))
    store = open_store(str(tmp_path / "store"))
    init = committed(store, "checkpoints/sft/a", tmp_path, Lineage(kind="checkpoint", name="sft a"))
    prompts = committed(store, "datasets/arith", tmp_path, Lineage(kind="dataset", name="arith", config={"contract": "chat@1"}))
    shard = committed(store, "checkpoints/rl/b-rollouts/step-000001", tmp_path,
                      Lineage(kind="dataset", name="rollouts", config={"contract": "rollout@1", "step": 1, "rank": 0}))
    rollouts = data_input(shard, 8, "rollout@1").model_copy(update={"role": "rollouts"})
    module = RewardModuleRef(path="rewards.verifiers.ArithExactMatch", source_sha256="0" * 64)
    checkpoint = committed(store, "checkpoints/rl/b", tmp_path, Lineage(
        kind="checkpoint", name="rl b", parents=[parent_ref(init, "init")],
        inputs=[data_input(prompts, None, "chat@1"), rollouts], reward_modules=[module], config_sha256="c" * 64, seed=3))

    flow_run = str(uuid.uuid4())
    trained = StageRunEvents("reasoning_rl", "b", flow_run, "pipeline")
    trained.start()
    trained.complete(checkpoint)
    broken = StageRunEvents("reasoning_rl", "c", flow_run, "pipeline")
    broken.start()
    broken.fail(RuntimeError("reward module 'broken' returned nan"))

    events = read_events(tmp_path / "events.jsonl")
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "FAIL"]
    assert [body for _, _, body in received] == events  # the same events reached the endpoint
    assert {(path, auth) for path, auth, _ in received} == {("/api/v1/lineage", "Bearer lineage-token")}
    for event in events:
        validate_event(event)
        assert event["job"] == {**event["job"], "namespace": "posttrain", "name": "reasoning_rl"}
        assert event["run"]["facets"]["parent"]["run"]["runId"] == flow_run
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"] != events[2]["run"]["runId"]
    check_complete_event(events[1], checkpoint)
    assert [d["facets"]["posttrain"].get("rows") for d in events[1]["inputs"]] == [None, None, 8]
    assert events[3]["run"]["facets"]["errorMessage"]["message"] == "RuntimeError: reward module 'broken' returned nan"
