"""Kubernetes: the job as a Kubeflow PyTorchJob (Master + Workers) or as an Indexed Job with a headless
Service, both rendered from the same settings: one pod per node, each running torchrun with the node's
ranks, rendezvous at pod 0.

run.json travels in a ConfigMap the job owns (no shared file system needed, and it goes with the job);
each pod's scratch folder is an emptyDir, or a folder of its own on a shared claim for engines outside
the job that load pushed weights from it. The store must be one the pods reach: an s3:// URI (its
credentials from a Secret) or a folder on one of the mounted claims.

Rendering (`manifests`) is pure, so it is tested offline; `start` submits through the API server
(infra/launchers/kubernetes_job.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.launch import JOB_DIR_ENV, JOB_ID_ENV, JobRequest, LaunchFailed
from infra.launchers.fields import Environment

if TYPE_CHECKING:
    from infra.launchers.kubernetes_job import KubernetesJob

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# What Kubernetes names claims, secrets, service accounts and priority classes by (RFC 1123 subdomains):
# a field is the name of an object, never text that reaches a manifest or a command as something else.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# A label or taint key: an optional DNS-subdomain prefix and a name (nvidia.com/gpu.product).
LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"  # registry/path:tag@sha256:digest, one word
# The operator's pods and Services are <name>-worker-<i>, an Indexed Job's pod host names <name>-<i>:
# DNS labels of at most 63 characters, so the job's own name stays well below.
NAME_LIMIT = 40
LABEL = "posttrain/job"
CONTAINER = "pytorch"  # the training operator finds its port and sets its variables on this name
CONFIG_DIR = "/etc/posttrain"
SCRATCH_DIR = "/scratch"
OWN_VOLUMES = {"run-config": CONFIG_DIR, "scratch": SCRATCH_DIR, "dshm": "/dev/shm"}
# A finished job stays this long for `kubectl logs` and `describe`, then goes with its pods and ConfigMap.
FINISHED_TTL_S = 86400
# What the pods need of this process's environment: the store's root and endpoint. Credentials never go
# into a manifest (anyone who may read jobs would read them): they come from `store_secret`.
FORWARDED = ("POSTTRAIN_STORE", "POSTTRAIN_S3_ENDPOINT_URL")


class VolumeClaim(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., pattern=DNS_LABEL, description="Volume name in the pods.")
    claim: str = Field(..., pattern=DNS_SUBDOMAIN, description="A PersistentVolumeClaim in the job's namespace.")
    mount_path: str = Field(..., pattern=r"^/", description="Where the ranks see it.")


class Toleration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(..., pattern=LABEL_KEY, description="The taint's key (e.g. nvidia.com/gpu).")
    operator: Literal["Exists", "Equal"] = Field("Exists", description="Any value of the key, or the one in value.")
    value: str | None = Field(None, pattern=LABEL_VALUE, description="The taint's value, with operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect tolerated; default all.")

    @model_validator(mode="after")
    def _value_only_to_equal(self) -> Toleration:
        if self.value is not None and self.operator == "Exists":
            raise ValueError("a value is matched with operator Equal (Exists matches any)")
        return self


class KubernetesLaunch(BaseModel):
    """Run the job's pods on a Kubernetes cluster, as a Kubeflow PyTorchJob or an Indexed Job."""

    model_config = ConfigDict(extra="forbid", title="Kubernetes")
    kind: Literal["kubernetes"] = Field("kubernetes", description="a Kubernetes Job (or a PyTorchJob for several ranks)")
    manifest: Literal["pytorchjob", "indexed-job"] = Field(
        "pytorchjob", description="A Kubeflow PyTorchJob (needs the training operator) or a plain Indexed Job "
                                  "with a headless Service for the rendezvous.")
    image: str = Field(..., pattern=IMAGE, description="An image of this repository with its .venv "
                                                      "(built for CUDA on GPU nodes).")
    namespace: str = Field("default", pattern=DNS_LABEL, description="Namespace of the job and its objects.")
    nodes: int = Field(1, ge=1, description="Pods, one per node.")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per pod (nvidia.com/gpu); 0 for CPU nodes.")
    processes_per_node: int | None = Field(None, ge=1, description="Ranks per pod; default one per GPU (1 without).")
    cpu: str | None = Field(None, pattern=QUANTITY, description="CPUs per pod, a quantity (e.g. 32, 500m).")
    memory: str | None = Field(None, pattern=QUANTITY, description="Memory per pod, a quantity (e.g. 512Gi).")
    store_secret: str | None = Field(None, pattern=DNS_LABEL, description="A Secret whose keys become the ranks' "
                                     "variables: the store's credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                                     "AWS_ENDPOINT_URL), and any other secret (WANDB_API_KEY).")
    volumes: list[VolumeClaim] = Field(default_factory=list, description="Claims to mount in every pod (a "
                                       "model cache; a file store, mounted at the path the config names).")
    scratch_claim: str | None = Field(None, pattern=DNS_SUBDOMAIN, description="A ReadWriteMany claim for the job's scratch folder "
                                      "(/scratch/JOB_NAME, left there), for engines outside the job that "
                                      "load pushed weights from it; default a folder on each node.")
    environment: Environment = Field(default_factory=dict, description="More variables for every rank.")
    service_account: str | None = Field(None, pattern=DNS_SUBDOMAIN, description="The pods' service account (e.g. one with a cloud "
                                                          "role for the bucket instead of store_secret).")
    image_pull_secret: str | None = Field(None, pattern=DNS_SUBDOMAIN, description="A Secret for pulling the image from a private registry.")
    node_selector: dict[Annotated[str, Field(pattern=LABEL_KEY)], Annotated[str, Field(pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, description="Node labels the pods require "
                                          "(e.g. nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3).")
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints of GPU nodes the pods tolerate.")
    priority_class: str | None = Field(None, pattern=DNS_SUBDOMAIN, description="The pods' PriorityClass.")
    working_dir: str = Field("/app", pattern=r"^/", description="The repository's folder in the image.")
    python: str = Field(".venv/bin/python", description="The image's Python, relative to working_dir or absolute.")
    master_port: int = Field(29500, ge=1024, le=65535, description="Rendezvous port on pod 0.")

    @model_validator(mode="after")
    def _distinct_volumes(self) -> KubernetesLaunch:
        names, paths = set(OWN_VOLUMES), set(OWN_VOLUMES.values())
        for volume in self.volumes:
            if volume.name in names or volume.mount_path in paths:
                raise ValueError(f"volumes: {volume.name} at {volume.mount_path} clashes with another volume "
                                 f"(the job's own are {', '.join(f'{n} at {p}' for n, p in OWN_VOLUMES.items())})")
            names.add(volume.name)
            paths.add(volume.mount_path)
        return self

    def ranks_per_node(self) -> int:
        return self.processes_per_node or self.gpus_per_node or 1

    def start(self, request: JobRequest) -> KubernetesJob:
        # The client takes seconds to import: only a process that submits a job pays for it.
        from infra.launchers.kubernetes_job import submit

        run_json = request.config_path.read_text()
        forwarded = {name: os.environ[name] for name in FORWARDED if os.environ.get(name)}
        store = json.loads(run_json).get("store") or forwarded.get("POSTTRAIN_STORE")
        if not self.reaches(store):
            raise LaunchFailed(f"the store {store or './artifacts (the default)'} is a folder of this machine: "
                               "give the pods an s3:// store, or a folder on one of launch.volumes")
        name = job_name(request.name)
        return submit(self.manifests(request, run_json, name, forwarded), f"kubernetes:{self.namespace}/{name}")

    def reaches(self, store: str | None) -> bool:
        """Whether the pods reach the store root: an S3 bucket, or a folder on a mounted claim."""
        parts = urlsplit(store or "")
        if parts.scheme == "s3":
            return True
        path = PurePosixPath(unquote(parts.path) if parts.scheme == "file" else store or "")
        return path.is_absolute() and any(path.is_relative_to(volume.mount_path) for volume in self.volumes)

    def manifests(self, request: JobRequest, run_json: str, name: str, forwarded: dict[str, str]) -> list[dict]:
        """The job first, then what it owns: run.json's ConfigMap (and the Indexed Job's Service)."""
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self._metadata(name),
                      "data": {"run.json": run_json}}
        if self.manifest == "pytorchjob":
            return [self._pytorchjob(request, name, forwarded), config_map]
        # Pod i is <name>-i.<name>: the Job's pods take the Service's name as subdomain. Their DNS records
        # exist before they are ready, so no rank waits for pod 0's name to resolve.
        service = {"apiVersion": "v1", "kind": "Service", "metadata": self._metadata(name),
                   "spec": {"clusterIP": "None", "selector": {LABEL: name}, "publishNotReadyAddresses": True}}
        return [self._indexed_job(request, name, forwarded), config_map, service]

    def _pytorchjob(self, request: JobRequest, name: str, forwarded: dict[str, str]) -> dict:
        # The operator sets MASTER_ADDR and MASTER_PORT (pod 0's Service, the container's pytorchjob-port)
        # and RANK, the node's rank: the Master is 0, Worker i is i+1.
        def replica(count: int) -> dict:
            template = self._pod_template(request, name, forwarded, "$(RANK)", "$(MASTER_ADDR)", "$(MASTER_PORT)")
            template["spec"]["containers"][0]["ports"] = [{"name": "pytorchjob-port",
                                                            "containerPort": self.master_port}]
            return {"replicas": count, "restartPolicy": "Never", "template": template}

        replicas = {"Master": replica(1)} | ({"Worker": replica(self.nodes - 1)} if self.nodes > 1 else {})
        return {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": self._metadata(name),
            "spec": {
                "nprocPerNode": str(self.ranks_per_node()),
                # A failed stage is resumed by running it again, from its last committed step; the pods
                # still running when one fails go, the failed one stays for its logs and exit code.
                "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": FINISHED_TTL_S},
                "pytorchReplicaSpecs": replicas,
            },
        }

    def _indexed_job(self, request: JobRequest, name: str, forwarded: dict[str, str]) -> dict:
        template = self._pod_template(request, name, forwarded, "$(JOB_COMPLETION_INDEX)", f"{name}-0.{name}",
                                      str(self.master_port))
        template["spec"] |= {"subdomain": name, "restartPolicy": "Never"}
        return {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": self._metadata(name),
            "spec": {
                "completionMode": "Indexed", "completions": self.nodes, "parallelism": self.nodes,
                "backoffLimit": 0,  # a failed stage is resumed by running it again, from its last committed step
                "ttlSecondsAfterFinished": FINISHED_TTL_S,
                "template": template,
            },
        }

    def _pod_template(self, request: JobRequest, name: str, forwarded: dict[str, str], node_rank: str,
                      master_addr: str, master_port: str) -> dict:
        """One node's pod: torchrun with the node's ranks; `$(VAR)`s are the pod's variables, which
        Kubernetes expands in the command."""
        python = PurePosixPath(self.working_dir) / self.python
        job_dir = f"{SCRATCH_DIR}/{name}"
        command = [str(python), "-m", "torch.distributed.run", f"--nnodes={self.nodes}",
                   f"--nproc_per_node={self.ranks_per_node()}", f"--node_rank={node_rank}",
                   f"--master_addr={master_addr}", f"--master_port={master_port}",
                   "-m", request.module, "--config", f"{CONFIG_DIR}/run.json"]
        variables = {JOB_ID_ENV: f"kubernetes:{self.namespace}/{name}", JOB_DIR_ENV: job_dir,
                     "PYTHONUNBUFFERED": "1", **forwarded, **self.environment}
        container = {"name": CONTAINER, "image": self.image, "workingDir": self.working_dir, "command": command,
                     "env": [{"name": key, "value": value} for key, value in variables.items()]}
        if self.store_secret:
            container["envFrom"] = [{"secretRef": {"name": self.store_secret}}]
        limits = {"cpu": self.cpu, "memory": self.memory,
                  "nvidia.com/gpu": str(self.gpus_per_node) if self.gpus_per_node else None}
        if limits := {resource: amount for resource, amount in limits.items() if amount}:
            container["resources"] = {"limits": limits}  # requests default to the limits
        # A shared claim holds every job's scratch: each pod mounts its job's own folder (created on mount).
        scratch = ({"persistentVolumeClaim": {"claimName": self.scratch_claim}} if self.scratch_claim
                   else {"emptyDir": {}})
        container["volumeMounts"] = [
            {"name": "run-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "scratch", "mountPath": job_dir, **({"subPath": name} if self.scratch_claim else {})},
            {"name": "dshm", "mountPath": "/dev/shm"},
            *({"name": volume.name, "mountPath": volume.mount_path} for volume in self.volumes)]
        volumes = [
            {"name": "run-config", "configMap": {"name": name}},
            {"name": "scratch", **scratch},
            # A container's /dev/shm is 64 MiB: NCCL and DataLoader workers need far more (it counts as memory).
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            *({"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim}} for volume in self.volumes)]
        spec: dict = {"containers": [container], "volumes": volumes}
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        if self.image_pull_secret:
            spec["imagePullSecrets"] = [{"name": self.image_pull_secret}]
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [toleration.model_dump(exclude_none=True) for toleration in self.tolerations]
        if self.priority_class:
            spec["priorityClassName"] = self.priority_class
        return {"metadata": {"labels": {LABEL: name}}, "spec": spec}

    def _metadata(self, name: str) -> dict:
        return {"name": name, "namespace": self.namespace, "labels": {LABEL: name}}


def job_name(stage: str, suffix: str | None = None) -> str:
    """`stage` as a DNS label with a suffix of its own (random by default): two launches never share a name."""
    suffix = suffix or secrets.token_hex(3)
    base = re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-")
    return f"{base[:NAME_LIMIT - len(suffix) - 1].rstrip('-')}-{suffix}"
