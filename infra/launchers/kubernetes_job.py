"""A stage job on a Kubernetes cluster through its API server: submitted, its pods' logs followed, its end
read from the job's conditions, deleted on cancel.

Both kinds of job (a Kubeflow PyTorchJob, a batch/v1 Job) go through the generic objects API as plain
dicts, so they share one code path; their pods carry the `posttrain/job` label.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Iterator
from functools import partial

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines

from infra.launch import JobEnd, LaunchFailed, polled_end
from infra.launchers.kubernetes import CONTAINER, LABEL

POLL_S = 5.0
CANCEL_WAIT_S = 120.0
# A log stream silent this long is opened again (a load balancer may have dropped it without a word).
LOG_IDLE_S = 300.0
# A reopened stream starts this much before the last line received; the lines seen already are skipped.
LOG_OVERLAP_S = 60
LOG_RETRIES = 10
API_TIMEOUT_S = 30.0
RESOURCES = {"PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"), "Job": ("batch", "v1", "jobs")}
SUCCEEDED = {"Succeeded", "Complete"}  # the final condition of a PyTorchJob, of a Job; both fail as Failed
TRANSIENT = {429, 500, 502, 503, 504}


def submit(manifests: list[dict], job_id: str) -> KubernetesJob:
    """Create the job, then what it owns (ConfigMap, Service) with the job as their owner, so they go with it.
    Pods that start before their ConfigMap exists wait for it."""
    api = connect()
    job, *owned = manifests
    group, version, plural = RESOURCES[job["kind"]]
    namespace = job["metadata"]["namespace"]
    try:
        created = client.CustomObjectsApi(api).create_namespaced_custom_object(group, version, namespace, plural, job)
    except ApiException as error:
        hint = " (is the Kubeflow training operator installed?)" if error.status == 404 else ""
        raise LaunchFailed(f"Kubernetes refused the {job['kind']}: {refusal(error)}{hint}") from error
    launched = KubernetesJob(api, job, owned, job_id)
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": launched.name,
             "uid": created["metadata"]["uid"]}
    core = client.CoreV1Api(api)
    create = {"ConfigMap": core.create_namespaced_config_map, "Service": core.create_namespaced_service}
    for manifest in owned:
        try:
            owned_manifest = manifest | {"metadata": manifest["metadata"] | {"ownerReferences": [owner]}}
            create[manifest["kind"]](namespace, owned_manifest)
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            launched.delete()
            why = refusal(error) if isinstance(error, ApiException) else str(error)
            raise LaunchFailed(f"could not create the job's {manifest['kind']}: {why}") from error
    return launched


def connect() -> client.ApiClient:
    """The cluster of the kubeconfig ($KUBECONFIG, ~/.kube/config), else the one this pod runs in."""
    try:
        return config.new_client_from_config()
    except ConfigException:
        pass
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException as error:
        raise LaunchFailed(f"no Kubernetes cluster to submit to: no kubeconfig, and not in a pod ({error})") from error
    return client.ApiClient(configuration)


def refusal(error: ApiException) -> str:
    """The API server's message (its Status object's), else the HTTP reason."""
    try:
        return json.loads(error.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{error.status} {error.reason}"


class KubernetesJob:
    def __init__(self, api: client.ApiClient, job: dict, owned: list[dict], job_id: str):
        self.job_id, self.name, self.namespace = job_id, job["metadata"]["name"], job["metadata"]["namespace"]
        self.group, self.version, self.plural = RESOURCES[job["kind"]]
        self.owned = [manifest["kind"] for manifest in owned]
        self.objects, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.end: JobEnd | None = None
        self.final_condition = ""
        self.received: queue.Queue[str] = queue.Queue()

    def lines(self) -> Iterator[str]:
        """Each pod's log lines as `pod-<node>: ...` from the moment its container starts, and why a pod
        waits (unschedulable, pulling its image) whenever that changes; until the job has ended and every
        log is read."""
        followers: dict[str, threading.Thread] = {}
        reported: dict[str, str] = {}
        while True:
            ended = self.poll() is not None  # before looking at the pods, so no pod started before it is missed
            for pod in self._pods():
                name, label = pod.metadata.name, f"pod-{node_index(pod)}"
                if name in followers:
                    continue
                if started(pod):
                    followers[name] = threading.Thread(target=self._follow, args=(name, label), daemon=True)
                    followers[name].start()
                elif (why := waiting_reason(pod)) and reported.get(name) != why:
                    reported[name] = why
                    yield f"{label}: {why}"
            done = ended and not any(follower.is_alive() for follower in followers.values())
            yield from self._received_for(0.0 if done else POLL_S)
            if done:
                yield self.final_condition
                return

    def _received_for(self, seconds: float) -> Iterator[str]:
        deadline = time.monotonic() + seconds
        while True:
            try:
                yield self.received.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return

    def _follow(self, pod: str, label: str) -> None:
        """Pass on the pod's log lines until its container has ended, opening the stream again after a
        dropped or silent connection: each line carries the server's timestamp, and those at or before the
        last one passed on are skipped."""
        last_stamp, last_received, failures = "", None, 0
        while failures < LOG_RETRIES:  # in a row, without a line in between
            since = None if last_received is None else int(time.monotonic() - last_received) + LOG_OVERLAP_S
            resumed = last_received is not None
            try:
                response = self.core.read_namespaced_pod_log(
                    pod, self.namespace, container=CONTAINER, follow=True, timestamps=True, since_seconds=since,
                    _preload_content=False, _request_timeout=(API_TIMEOUT_S, LOG_IDLE_S))
                try:
                    for line in iter_resp_lines(response):
                        stamp, _, text = line.partition(" ")
                        stamp = sortable(stamp)
                        if resumed and stamp <= last_stamp:
                            continue
                        last_stamp, last_received, failures = stamp, time.monotonic(), 0
                        self.received.put(f"{label}: {text}")
                finally:
                    response.release_conn()
                if self._container_ended(pod):
                    return
            except ApiException as error:
                if error.status == 404:
                    return  # the pod is gone, and its log with it
                if error.status not in TRANSIENT:
                    self.received.put(f"{label}: cannot read its log: {refusal(error)}")
                    return
                failures += 1
            except (urllib3.exceptions.HTTPError, OSError):
                failures += 1
            time.sleep(POLL_S)
        self.received.put(f"{label}: its log stream failed {LOG_RETRIES} times; reading no more of it")

    def _container_ended(self, pod: str) -> bool:
        try:
            status = self.core.read_namespaced_pod(pod, self.namespace, _request_timeout=API_TIMEOUT_S).status
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        return any(container.name == CONTAINER and container.state.terminated
                   for container in status.container_statuses or [])

    def _pods(self) -> list[client.V1Pod]:
        try:
            return self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL}={self.name}",
                                                 _request_timeout=API_TIMEOUT_S).items
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            if isinstance(error, ApiException) and error.status not in TRANSIENT:
                raise
            return []

    def poll(self) -> JobEnd | None:
        """The job's end once it has a final condition, else None (and None while the API server is unreachable)."""
        if self.end is None:
            try:
                job = self._get()
            except ApiException as error:
                if error.status == 404:  # deleted (kubectl delete): a cancel, reported as Slurm reports scancel
                    self.end, self.final_condition = JobEnd("CANCELLED", 143), f"{self.name}: deleted"
                    return self.end
                if error.status not in TRANSIENT:
                    raise
                return None
            except urllib3.exceptions.HTTPError:
                return None
            conditions = (job.get("status") or {}).get("conditions") or []
            final = next((condition for condition in conditions if condition.get("status") == "True"
                          and condition.get("type") in SUCCEEDED | {"Failed"}), None)
            if final:
                self.final_condition = ": ".join(
                    part for part in (self.name, final["type"], final.get("reason"), final.get("message")) if part)
                succeeded = final["type"] in SUCCEEDED
                self.end = JobEnd("COMPLETED", 0) if succeeded else JobEnd("FAILED", self._exit_code())
        return self.end

    def _exit_code(self) -> int:
        """The exit code of the container that failed first (the others were stopped after it); 1 when no
        container failed (a deadline, an evicted pod)."""
        failed = [ended for pod in self._pods() for container in pod.status.container_statuses or []
                  if container.name == CONTAINER and (ended := container.state.terminated) and ended.exit_code]
        if not failed:
            return 1
        first = min(failed, key=lambda ended: ended.finished_at.timestamp() if ended.finished_at else math.inf)
        return first.exit_code

    def wait(self) -> JobEnd:
        return polled_end(self.poll, POLL_S)

    def cancel(self) -> None:
        """Delete the job (its pods first) and what it owns; return once the job is gone."""
        if self.poll() is not None:
            return
        self.delete()
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            try:
                self._get()
            except ApiException as error:
                if error.status == 404:
                    return
            except urllib3.exceptions.HTTPError:
                pass  # the API server unreachable for a moment: ask again
            time.sleep(POLL_S)

    def delete(self) -> None:
        deletions = [partial(self.objects.delete_namespaced_custom_object, self.group, self.version, self.namespace,
                             self.plural, self.name, propagation_policy="Foreground")]
        owned = {"ConfigMap": self.core.delete_namespaced_config_map, "Service": self.core.delete_namespaced_service}
        deletions += [partial(owned[kind], self.name, self.namespace) for kind in self.owned]
        for deletion in deletions:
            try:
                deletion()
            except ApiException as error:
                if error.status != 404:
                    raise

    def _get(self) -> dict:
        return self.objects.get_namespaced_custom_object(self.group, self.version, self.namespace, self.plural,
                                                         self.name, _request_timeout=API_TIMEOUT_S)


def node_index(pod: client.V1Pod) -> str:
    """The pod's node rank: an Indexed Job's completion index, a PyTorchJob's Master 0 and Worker i i+1."""
    labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
    if "batch.kubernetes.io/job-completion-index" in annotations:
        return annotations["batch.kubernetes.io/job-completion-index"]
    replica = labels.get("training.kubeflow.org/replica-index")
    if replica is None:
        return pod.metadata.name
    worker = labels.get("training.kubeflow.org/replica-type", "").lower() == "worker"
    return str(int(replica) + 1) if worker else replica


def started(pod: client.V1Pod) -> bool:
    """Whether the container runs or ran: only then has it a log to follow."""
    return any(container.name == CONTAINER and (container.state.running or container.state.terminated)
               for container in pod.status.container_statuses or [])


def waiting_reason(pod: client.V1Pod) -> str | None:
    """Why a pod's container has not started: unschedulable, pulling or failing to pull its image, ..."""
    status = pod.status
    for container in status.container_statuses or []:
        if container.state.waiting and container.state.waiting.reason:
            return ": ".join(part for part in (container.state.waiting.reason, container.state.waiting.message) if part)
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return ": ".join(part for part in (condition.reason, condition.message) if part)
    if status.phase == "Failed":
        return ": ".join(part for part in ("Failed", status.reason, status.message) if part)
    return None


def sortable(stamp: str) -> str:
    """An RFC 3339 timestamp in UTC, its fraction of a second at 9 digits: later is greater as a string."""
    seconds, _, fraction = stamp.rstrip("Z").partition(".")
    return f"{seconds}.{fraction:0<9}"
