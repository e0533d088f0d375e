"""A :class:`~study.deploy.kuberay.deployment.Deployment` as Kubernetes objects, plain data: the ``ConfigMap``
(:func:`configmap`: the spec and the entrypoint's script, :func:`start_script`) and the ``RayJob`` (:func:`rayjob`: a
cluster of its own, its pods, each container's variables from Secrets and its resources)."""

from __future__ import annotations

from typing import Any

import yaml

from study.deploy.kuberay.deployment import Deployment
from study.deploy.render import fill, load_template
from trainables.schema import record as R

__all__ = ["configmap", "rayjob", "start_script"]

#: Where the ConfigMap is mounted on the head pod, and the entrypoint that runs from it.
MOUNT = "/etc/dmlstudy"
START_SCRIPT = "start.sh"
ENTRYPOINT = f"bash {MOUNT}/{START_SCRIPT}"
#: The key KubeRay reads the token from in ``authOptions.secretName`` (ray-operator ``RAY_AUTH_TOKEN_SECRET_KEY``).
TOKEN_KEY = "auth_token"
#: The S3 variables pyarrow (``storage: s3://``) and boto3 read: the keys are required, the rest used when present.
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
S3_OPTIONAL = ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
#: Store credentials a URL need not name: libpq's and MLflow's own variables, used when the Secret holds them.
STORE_OPTIONAL = ("PGPASSWORD", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")


def _secret_env(name: str, secret: str, key: str, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True  # the variable is left unset when the Secret lacks the key
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _env(d: Deployment, role: str) -> list[dict[str, Any]]:
    """The variables of a container: the token everywhere; S3 on the head and the workers; stores on the head."""
    env = [{"name": "RAY_AUTH_MODE", "value": "token"}, _secret_env("RAY_AUTH_TOKEN", d.token_secret, TOKEN_KEY)]
    if role in ("head", "worker"):
        env += [_secret_env(k, d.s3_secret, k) for k in S3_KEYS]
        env += [_secret_env(k, d.s3_secret, k, optional=True) for k in S3_OPTIONAL]
    if role == "head":
        taken = {e["name"] for e in env}
        env += [_secret_env(k, d.db_secret, k) for k in d.db_vars if k not in taken]
        env += [_secret_env(k, d.db_secret, k, optional=True) for k in STORE_OPTIONAL if k not in d.db_vars]
    return env


def _resources(cpus: int, memory: str, gpus: int = 0) -> dict[str, Any]:
    # Requests equal limits: the pod is Guaranteed, and KubeRay tells Ray the limits (--num-cpus, --num-gpus).
    amounts: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        amounts["nvidia.com/gpu"] = gpus
    return {"limits": amounts, "requests": dict(amounts)}


def _pod(d: Deployment, container: dict[str, Any], with_spec: bool = False) -> dict[str, Any]:
    """A Ray pod: its container, /dev/shm in memory (Ray's object store and PyTorch's loaders use it), the
    ``--volume``s, and on the head the ConfigMap (the spec and the entrypoint) at :data:`MOUNT`."""
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    for i, (claim, path) in enumerate(d.volumes):
        mounts.append({"name": f"data-{i}", "mountPath": path, "readOnly": True})
        volumes.append({"name": f"data-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
    if with_spec:
        mounts.append({"name": "study-spec", "mountPath": MOUNT, "readOnly": True})
        volumes.append({"name": "study-spec", "configMap": {"name": _configmap_name(d)}})
    return {"spec": {"containers": [{**container, "volumeMounts": mounts}], "volumes": volumes}}


def _configmap_name(d: Deployment) -> str:
    return f"{d.name}-spec"


#: The entrypoint's template (package data: study/deploy/templates/), filled by :func:`study.deploy.render.fill`.
TEMPLATE = "kuberay_start.sh"


def start_script(d: Deployment) -> str:
    """The entrypoint: start the study, or continue it (``--resume``) when its ``spec.yaml`` is in the bucket."""
    values = {
        "spec": f"{MOUNT}/{R.SPEC_FILE}",
        "name": d.spec.name,
        "study_spec": f"{d.study_root}/{R.SPEC_FILE}",
        "max_failures": d.max_failures,
    }
    return fill(load_template(TEMPLATE), values)


def configmap(d: Deployment) -> dict[str, Any]:
    spec_text = yaml.safe_dump(d.raw, sort_keys=False, default_flow_style=None, allow_unicode=True, width=120)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(d, _configmap_name(d)),
        "data": {R.SPEC_FILE: spec_text, START_SCRIPT: start_script(d)},
    }


def _metadata(d: Deployment, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if d.namespace:
        meta["namespace"] = d.namespace
    meta["labels"] = {"app.kubernetes.io/part-of": "dmlstudy", "app.kubernetes.io/instance": d.name}
    meta["annotations"] = {"dmlstudy/study": d.spec.name, "dmlstudy/storage": d.study_root}
    return meta


def _containers(d: Deployment) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The head's, a worker's and the job submitter's container."""
    head = {
        "name": "ray-head",
        "image": d.image,
        "env": _env(d, "head"),
        "ports": [
            {"name": "gcs-server", "containerPort": 6379},
            {"name": "dashboard", "containerPort": 8265},
            {"name": "client", "containerPort": 10001},
        ],
        "resources": _resources(d.head_cpus, d.head_memory),
    }
    worker = {
        "name": "ray-worker",
        "image": d.image,
        "env": _env(d, "worker"),
        "resources": _resources(d.sizing.cpus, d.sizing.memory, d.sizing.gpus),
    }
    submitter = {
        "name": "ray-job-submitter",
        "image": d.image,
        "env": _env(d, "submitter"),
        "resources": _resources(1, "1Gi"),
    }
    return head, worker, submitter


def rayjob(d: Deployment) -> dict[str, Any]:
    """The RayJob manifest: a cluster of its own (a head without trials, fixed workers) whose entrypoint runs the
    study."""
    head, worker, submitter = _containers(d)
    n = d.sizing.workers
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _metadata(d, d.name),
        "spec": {
            "entrypoint": ENTRYPOINT,
            # Retries start a new cluster, whose entrypoint continues the study (start.sh): a lost head pod (the
            # driver with it) costs the trials' work since their last checkpoint, not the study.
            "backoffLimit": d.backoff_limit,
            # GPUs are released when the study ends; everything it made is in the bucket and the stores.
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": d.ttl_seconds,
            # The submitter runs `ray job submit` against the head: it needs the token too (KubeRay fills its command).
            "submitterPodTemplate": {"spec": {"restartPolicy": "Never", "containers": [submitter]}},
            "rayClusterSpec": {
                "rayVersion": d.ray_version,
                # KubeRay >= 1.5.1 also injects the token itself; the variables above are explicit all the same.
                "authOptions": {"mode": "token", "secretName": d.token_secret},
                "enableInTreeAutoscaling": False,
                "headGroupSpec": {
                    # No trials on the head: it holds the driver, the GCS and the dashboard.
                    "rayStartParams": {"num-cpus": "0"},
                    "template": _pod(d, head, with_spec=True),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu" if d.sizing.gpus else "cpu",
                        "replicas": n,
                        "minReplicas": n,
                        "maxReplicas": n,
                        "rayStartParams": {},
                        "template": _pod(d, worker),
                    }
                ],
            },
        },
    }
