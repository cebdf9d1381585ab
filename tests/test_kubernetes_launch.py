"""The Kubernetes launcher's manifests, offline: no API server can run here, so every rendered object is
checked against the Kubernetes schemas of a pinned version (kubernetes-validate, strict: no unknown
fields), the PyTorchJob against the Kubeflow training operator's models, and both flavours against
golden files (POSTTRAIN_UPDATE_GOLDEN=1 rewrites them). The job's log, end and cancel logic runs against a
fake API server."""

import copy
import json
import os
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kubeflow.training import ApiClient, KubeflowOrgV1PyTorchJob
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config
from pydantic import ValidationError

from infra.launch import JobEnd, JobRequest, LaunchFailed
from infra.launchers import kubernetes_job
from infra.launchers.kubernetes import NAME_LIMIT, KubernetesLaunch, VolumeClaim, job_name

# The oldest Kubernetes the manifests are meant for: a field newer than it fails the test.
KUBERNETES_VERSION = "1.29"
GOLDEN = Path(__file__).parent / "golden"
REQUEST = JobRequest("stages.grpo.reasoning", Path("/runs/x/run.json"), Path("/runs/x/job-1"), "posttrain-grpo")
RUN_JSON = json.dumps({"run_id": "x", "store": "s3://bucket/posttrain"})
FORWARDED = {"POSTTRAIN_STORE": "s3://bucket/posttrain", "POSTTRAIN_S3_ENDPOINT_URL": "https://s3.example.com"}
NAME = "posttrain-grpo-0a1b2c"
# The training operator's words (its API validates them; the generated models do not).
REPLICA_TYPES, RESTART_POLICIES, CLEAN_POD_POLICIES = {"Master", "Worker"}, {"Never", "OnFailure", "Always",
                                                                             "ExitCode"}, {"All", "Running", "None"}


def two_gpu_nodes(manifest: str) -> KubernetesLaunch:
    return KubernetesLaunch(
        manifest=manifest, image="registry.example.com/posttrain:1.0", namespace="training", nodes=2,
        gpus_per_node=8, cpu="96", memory="1500Gi", store_secret="posttrain-s3",
        volumes=[VolumeClaim(name="hf-cache", claim="hf-cache", mount_path="/cache/huggingface")],
        environment={"HF_HOME": "/cache/huggingface", "WANDB_MODE": "offline"},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], priority_class="training")


def validate_with_kubernetes_schemas(manifest: dict) -> None:
    """Every built-in object as it is; a PyTorchJob (no schema there) through its pod templates."""
    if manifest["kind"] == "PyTorchJob":
        for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                          "template": replica["template"]}, KUBERNETES_VERSION, strict=True)
    else:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def validate_with_kubeflow_models(manifest: dict) -> None:
    """Read the PyTorchJob as the operator's client does and write it back: the models drop what they do
    not know and type what they do, so anything misspelt or mistyped comes back different."""
    api = ApiClient()
    job = api.deserialize(SimpleNamespace(data=json.dumps(manifest)), "KubeflowOrgV1PyTorchJob")
    assert isinstance(job, KubeflowOrgV1PyTorchJob)
    assert api.sanitize_for_serialization(job) == manifest
    spec = manifest["spec"]
    assert set(spec["pytorchReplicaSpecs"]) <= REPLICA_TYPES and "Master" in spec["pytorchReplicaSpecs"]
    assert spec["runPolicy"]["cleanPodPolicy"] in CLEAN_POD_POLICIES
    for replica in spec["pytorchReplicaSpecs"].values():
        assert replica["restartPolicy"] in RESTART_POLICIES
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert {"name": "pytorchjob-port", "containerPort": 29500} in container["ports"]


def validate(manifest: dict) -> None:
    validate_with_kubernetes_schemas(manifest)
    if manifest["kind"] == "PyTorchJob":
        validate_with_kubeflow_models(manifest)


@pytest.mark.parametrize("flavour", ["pytorchjob", "indexed-job"])
def test_every_manifest_is_valid_and_matches_its_golden_file(flavour):
    manifests = two_gpu_nodes(flavour).manifests(REQUEST, RUN_JSON, NAME, FORWARDED)
    for manifest in manifests:
        validate(manifest)
    rendered = yaml.safe_dump_all(manifests, sort_keys=False)
    golden = GOLDEN / f"kubernetes-{flavour}.yaml"
    if os.environ.get("POSTTRAIN_UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"the manifests differ from {golden} (POSTTRAIN_UPDATE_GOLDEN=1 rewrites it)"


@pytest.mark.parametrize("flavour", ["pytorchjob", "indexed-job"])
def test_a_misspelt_field_fails_validation(flavour):
    job = two_gpu_nodes(flavour).manifests(REQUEST, RUN_JSON, NAME, FORWARDED)[0]
    pods = job["spec"]["pytorchReplicaSpecs"].values() if flavour == "pytorchjob" else [job["spec"]]
    for replica in pods:
        replica["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePulPolicy"):
        validate_with_kubernetes_schemas(job)
    if flavour == "pytorchjob":
        with pytest.raises(AssertionError):
            validate_with_kubeflow_models(job)
        misspelt = copy.deepcopy(two_gpu_nodes(flavour).manifests(REQUEST, RUN_JSON, NAME, FORWARDED)[0])
        misspelt["spec"]["runPolicy"]["cleanPodPolicies"] = misspelt["spec"]["runPolicy"].pop("cleanPodPolicy")
        with pytest.raises(AssertionError):
            validate_with_kubeflow_models(misspelt)
    else:
        job = two_gpu_nodes(flavour).manifests(REQUEST, RUN_JSON, NAME, FORWARDED)[0]
        job["spec"]["completions"] = "2"
        with pytest.raises(kubernetes_validate.ValidationError):
            validate_with_kubernetes_schemas(job)


@pytest.mark.parametrize("flavour", ["pytorchjob", "indexed-job"])
def test_one_cpu_node_asks_for_no_gpu(flavour):
    launch = KubernetesLaunch(manifest=flavour, image="posttrain:dev")
    job, *owned = launch.manifests(REQUEST, RUN_JSON, NAME, {})
    for manifest in [job, *owned]:
        validate(manifest)
    if flavour == "pytorchjob":
        assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}
        pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    else:
        assert job["spec"]["completions"] == 1
        pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "resources" not in container and "envFrom" not in container
    assert "--nnodes=1" in container["command"] and "--nproc_per_node=1" in container["command"]
    assert container["command"][0] == "/app/.venv/bin/python"


@pytest.mark.parametrize("flavour", ["pytorchjob", "indexed-job"])
def test_a_scratch_claim_gives_each_job_a_folder_of_its_own_on_it(flavour):
    launch = KubernetesLaunch.model_validate(two_gpu_nodes(flavour).model_dump() | {
        "scratch_claim": "posttrain-scratch", "service_account": "trainer", "image_pull_secret": "registry"})
    job = launch.manifests(REQUEST, RUN_JSON, NAME, FORWARDED)[0]
    validate(job)
    templates = job["spec"]["pytorchReplicaSpecs"].values() if flavour == "pytorchjob" else [job["spec"]]
    for pod_spec in (replica["template"]["spec"] for replica in templates):
        assert {"name": "scratch", "persistentVolumeClaim": {"claimName": "posttrain-scratch"}} in pod_spec["volumes"]
        mount = next(m for m in pod_spec["containers"][0]["volumeMounts"] if m["name"] == "scratch")
        assert mount == {"name": "scratch", "mountPath": f"/scratch/{NAME}", "subPath": NAME}
        assert pod_spec["serviceAccountName"] == "trainer" and pod_spec["imagePullSecrets"] == [{"name": "registry"}]


def test_processes_per_node_default_to_the_gpus():
    assert KubernetesLaunch(image="i", gpus_per_node=4).ranks_per_node() == 4
    assert KubernetesLaunch(image="i", gpus_per_node=4, processes_per_node=2).ranks_per_node() == 2
    assert KubernetesLaunch(image="i").ranks_per_node() == 1


@pytest.mark.parametrize(("fields", "field"), [
    ({"nodes": 0}, "nodes"),
    ({"memory": "64GB"}, "memory"),
    ({"cpu": "lots"}, "cpu"),
    ({"namespace": "Team_A"}, "namespace"),
    ({"volumes": [{"name": "scratch", "claim": "c", "mount_path": "/data"}]}, "volumes"),
    ({"volumes": [{"name": "data", "claim": "c", "mount_path": "data"}]}, "volumes.0.mount_path"),
    ({"gpu_per_node": 8}, "gpu_per_node"),
    ({"tolerations": [{"key": "gpu", "value": "a100"}]}, "tolerations.0"),
])
def test_a_bad_setting_is_an_error_naming_it(fields, field):
    with pytest.raises(ValidationError) as raised:
        KubernetesLaunch(image="posttrain:dev", **fields)
    assert field in str(raised.value)


def test_an_image_is_required():
    with pytest.raises(ValidationError, match="image"):
        KubernetesLaunch()


def test_job_names_are_short_distinct_dns_labels():
    names = {job_name("posttrain-general_rl") for _ in range(20)}
    assert len(names) == 20
    long = job_name("posttrain-" + "x" * 80, "abc123")
    for name in [*names, long]:
        assert len(name) <= NAME_LIMIT
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}},
                                     KUBERNETES_VERSION, strict=True)
    assert job_name("posttrain-general_rl", "abc123") == "posttrain-general-rl-abc123"
    assert long.endswith("x-abc123")


def test_the_pods_must_reach_the_store(tmp_path, monkeypatch):
    launch = KubernetesLaunch(image="i", volumes=[{"name": "store", "claim": "store", "mount_path": "/mnt/store"}])
    assert launch.reaches("s3://bucket/prefix")
    assert launch.reaches("/mnt/store/artifacts") and launch.reaches("file:///mnt/store")
    assert not launch.reaches("./artifacts") and not launch.reaches("/home/me/artifacts") and not launch.reaches(None)
    monkeypatch.delenv("POSTTRAIN_STORE", raising=False)
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"run_id": "x", "store": None}))
    with pytest.raises(LaunchFailed, match="./artifacts"):
        launch.start(JobRequest("stages.sft.train", config, tmp_path / "job-1", "posttrain-sft"))


# The job against a fake API server: its pods, their logs, its conditions.

def pod(name: str, index: str, state: dict, *, exit_code: int = 0, finished: int = 0) -> client.V1Pod:
    if "terminated" in state:
        state = {"terminated": client.V1ContainerStateTerminated(
            exit_code=exit_code, finished_at=datetime.fromtimestamp(finished, UTC))}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={"batch.kubernetes.io/job-completion-index": index}),
        status=client.V1PodStatus(phase="Running", container_statuses=[client.V1ContainerStatus(
            name="pytorch", image="i", image_id="", ready=True, restart_count=0,
            state=client.V1ContainerState(**state))]))


class LogResponse:
    def __init__(self, lines: list[str]):
        self.data = "".join(f"{line}\n" for line in lines).encode()

    def stream(self, amt=None, decode_content=False):
        yield self.data

    def release_conn(self):
        pass


class FakeCluster:
    """The calls KubernetesJob makes, answered from `pods`, `logs` (lists of responses per pod, each a list
    of lines or an exception) and `conditions`."""

    def __init__(self, pods, logs, conditions):
        self.pods, self.logs, self.conditions, self.deleted = pods, logs, conditions, []

    def list_namespaced_pod(self, namespace, label_selector, **_):
        return SimpleNamespace(items=self.pods)

    def read_namespaced_pod(self, name, namespace, **_):
        return next(p for p in self.pods if p.metadata.name == name)

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        response = self.logs[name].pop(0)
        if isinstance(response, Exception):
            raise response
        return LogResponse(response)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **_):
        if self.deleted:
            raise ApiException(status=404)
        return {"status": {"conditions": self.conditions}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, propagation_policy):
        self.deleted.append((plural, propagation_policy))

    def delete_namespaced_config_map(self, name, namespace):
        self.deleted.append(("configmaps", name))

    def delete_namespaced_service(self, name, namespace):
        self.deleted.append(("services", name))


def fake_job(cluster: FakeCluster, monkeypatch) -> kubernetes_job.KubernetesJob:
    monkeypatch.setattr(kubernetes_job, "POLL_S", 0.01)
    job = KubernetesLaunch(image="i").manifests(REQUEST, RUN_JSON, NAME, {})[0]
    launched = kubernetes_job.KubernetesJob(client.ApiClient(), job, [{"kind": "ConfigMap"}], "kubernetes:default/x")
    launched.objects = launched.core = cluster
    return launched


def test_lines_are_labelled_with_their_node_and_a_resumed_stream_repeats_none(monkeypatch):
    cluster = FakeCluster(
        [pod("p0", "0", {"terminated": {}}), pod("p1", "1", {"terminated": {}})],
        {"p0": [["2026-01-01T00:00:00.1Z step 1", "2026-01-01T00:00:00.2Z step 2"],
                ["2026-01-01T00:00:00.2Z step 2", "2026-01-01T00:00:00.25Z step 3"]],
         "p1": [["2026-01-01T00:00:00.1Z ready"]]},
        [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    job = fake_job(cluster, monkeypatch)
    # The first stream of p0 ends while its container still runs (a dropped connection).
    running = iter([False])
    monkeypatch.setattr(job, "_container_ended", lambda name: name != "p0" or next(running, True))
    lines = list(job.lines())
    assert [line for line in lines if line.startswith("pod-0")] == ["pod-0: step 1", "pod-0: step 2", "pod-0: step 3"]
    assert "pod-1: ready" in lines
    assert lines[-1] == f"{NAME}: Failed: BackoffLimitExceeded"


def test_a_failed_job_ends_with_the_exit_code_of_the_first_container_that_failed(monkeypatch):
    cluster = FakeCluster(
        [pod("p0", "0", {"terminated": {}}, exit_code=143, finished=20),
         pod("p1", "1", {"terminated": {}}, exit_code=3, finished=10)],
        {}, [{"type": "Failed", "status": "True"}])
    assert fake_job(cluster, monkeypatch).wait() == JobEnd("FAILED", 3)
    cluster.conditions = [{"type": "Complete", "status": "True"}]
    assert fake_job(cluster, monkeypatch).wait() == JobEnd("COMPLETED", 0)


def test_a_waiting_pod_says_why_once(monkeypatch):
    why = client.V1ContainerStateWaiting(reason="ImagePullBackOff", message="no such image")
    waiting = pod("p0", "0", {"waiting": why})
    cluster = FakeCluster([waiting], {}, [])
    job = fake_job(cluster, monkeypatch)
    lines = job.lines()
    assert next(lines) == "pod-0: ImagePullBackOff: no such image"
    cluster.conditions = [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
    assert list(lines) == [f"{NAME}: Failed: DeadlineExceeded"]


def test_cancel_deletes_the_job_and_what_it_owns(monkeypatch):
    cluster = FakeCluster([], {}, [])
    job = fake_job(cluster, monkeypatch)
    job.cancel()
    assert cluster.deleted == [("pytorchjobs", "Foreground"), ("configmaps", NAME)]
    assert job.wait() == JobEnd("CANCELLED", 143)


class FakeApiServer(ThreadingHTTPServer):
    """The few routes of an API server the launcher calls, on 127.0.0.1: enough to run the real client's
    requests (paths, parameters, bodies, what it makes of the answers) end to end. One pod, one log line,
    the job Succeeded unless told otherwise."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.conditions = [{"type": "Running", "status": "False"},
                           {"type": "Succeeded", "status": "True", "reason": "Done"}]
        super().__init__(("127.0.0.1", 0), FakeApiHandler)


class FakeApiHandler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def log_message(self, *args):
        pass

    def answer(self, status: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.server.requests.append(("POST", self.path))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body["metadata"]["uid"] = f"uid-{body['kind']}"
        self.server.objects[body["kind"]] = body
        self.answer(201, body)

    def do_DELETE(self):
        self.server.requests.append(("DELETE", self.path))
        self.server.objects.pop("PyTorchJob" if "pytorchjobs" in self.path else "ConfigMap", None)
        self.answer(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def do_GET(self):
        self.server.requests.append(("GET", self.path))
        path = urlsplit(self.path).path
        if "/pytorchjobs/" in path:
            if "PyTorchJob" not in self.server.objects:
                return self.answer(404, {"kind": "Status", "apiVersion": "v1", "message": "not found", "code": 404})
            status = {"conditions": self.server.conditions}
            return self.answer(200, self.server.objects["PyTorchJob"] | {"status": status})
        pod = {"metadata": {"name": "p-master-0", "labels": {"training.kubeflow.org/replica-type": "master",
                                                             "training.kubeflow.org/replica-index": "0"}},
               "status": {"phase": "Succeeded", "containerStatuses": [{
                   "name": "pytorch", "image": "i", "imageID": "", "ready": False, "restartCount": 0,
                   "state": {"terminated": {"exitCode": 0}}}]}}
        if path.endswith("/pods"):
            return self.answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod]})
        if path.endswith("/log"):
            return self.answer(200, "2026-01-01T00:00:00.5Z hello from rank 0\n")
        return self.answer(200, pod)


@pytest.fixture
def api_server(tmp_path, monkeypatch):
    server = FakeApiServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}]}))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    monkeypatch.setattr(kubernetes_job, "POLL_S", 0.01)
    monkeypatch.setenv("POSTTRAIN_STORE", "s3://bucket/posttrain")
    yield server
    server.shutdown()
    server.server_close()


def test_the_client_submits_follows_and_deletes_through_the_api(api_server, tmp_path):
    config = tmp_path / "run.json"
    config.write_text(RUN_JSON)
    launch = KubernetesLaunch(image="posttrain:dev", namespace="training")
    job = launch.start(JobRequest("stages.sft.train", config, tmp_path / "job-1", "posttrain-sft"))
    name = job.job_id.removeprefix("kubernetes:training/")
    assert name.startswith("posttrain-sft-")
    assert api_server.requests[:2] == [("POST", "/apis/kubeflow.org/v1/namespaces/training/pytorchjobs"),
                                       ("POST", "/api/v1/namespaces/training/configmaps")]
    assert api_server.objects["ConfigMap"]["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name, "uid": "uid-PyTorchJob"}]
    assert list(job.lines()) == ["pod-0: hello from rank 0", f"{name}: Succeeded: Done"]
    assert job.wait() == JobEnd("COMPLETED", 0)
    job.end, api_server.conditions = None, [{"type": "Running", "status": "True"}]  # as if it still ran
    job.cancel()
    assert [request for request in api_server.requests if request[0] == "DELETE"] == [
        ("DELETE", f"/apis/kubeflow.org/v1/namespaces/training/pytorchjobs/{name}?propagationPolicy=Foreground"),
        ("DELETE", f"/api/v1/namespaces/training/configmaps/{name}")]
    assert job.poll() == JobEnd("CANCELLED", 143)


@pytest.mark.parametrize("change, field", [
    ({"image": "repo/img:1\nrm -rf /"}, "image"),
    ({"service_account": "../admin"}, "service_account"),
    ({"image_pull_secret": "Secret With Spaces"}, "image_pull_secret"),
    ({"priority_class": "x;y"}, "priority_class"),
    ({"scratch_claim": "-claim"}, "scratch_claim"),
    ({"volumes": [{"name": "cache", "claim": "a/b", "mount_path": "/cache"}]}, "volumes.0.claim"),
    ({"node_selector": {"gpu type": "h100"}}, "node_selector"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a b"}]}, "tolerations.0.value"),
])
def test_every_name_a_pod_spec_carries_is_checked_as_the_kubernetes_name_it_is(change, field):
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        KubernetesLaunch(**{"image": "ghcr.io/org/posttrain:1.0", **change})
    assert KubernetesLaunch(image="ghcr.io/org/posttrain:1.0@sha256:0abc", service_account="bucket-reader",
                            node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}).image
