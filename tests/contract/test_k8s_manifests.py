"""deploy/k8s and deploy/helm validated offline.

* Built-in kinds (PersistentVolumeClaim, Job, and the Pod and Service specs inside the DaskCluster) are
  validated with ``kubernetes-validate``'s bundled schemas, strict (unknown fields are errors).
* The DaskCluster is validated with ``jsonschema`` against the operator's CRD, vendored in
  tests/schemas/ (objects closed with additionalProperties: false, so a misspelt field the API
  server would silently prune is an error here).
* The Helm values are checked against the keys the dask/dask chart's templates read, and the worker
  and scheduler pods the chart builds from them are assembled the way its templates do and validated
  as Pods.  ``helm template``/``helm lint`` need the helm binary and the chart, which this machine
  cannot fetch: the chart's rendering itself is not run here.
* Every ``dask scheduler|worker`` command line is checked against the options the installed
  distributed accepts.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from cli_helpers import REPO
from contract.test_deploy import check_dask_command

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

K8S = REPO / "deploy" / "k8s" / "daskcluster.yaml"
VALUES = REPO / "deploy" / "helm" / "values.yaml"
CRD = Path(__file__).resolve().parents[1] / "schemas" / "daskcluster.crd.yaml"
# the oldest Kubernetes still supported by its cloud vendors at the time of writing, and the newest schemas
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def _documents():
    return list(yaml.safe_load_all(K8S.read_text()))


def _k8s_validate(resource: dict) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(resource, version, strict=True)


def _as_pod(pod_spec: dict, name: str = "check") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


def _closed(schema):
    """The CRD schema with every object that lists properties closed to other keys (the API server
    prunes unknown fields silently; here they are errors)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and not node.get(
                    "x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return schema


def _crd_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["names"]["kind"] == "DaskCluster"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return _closed(version["schema"]["openAPIV3Schema"])


def test_builtin_resources_validate_against_the_kubernetes_schemas():
    kinds = []
    for doc in _documents():
        if doc["apiVersion"].startswith("kubernetes.dask.org/"):
            continue
        _k8s_validate(doc)
        kinds.append(doc["kind"])
    assert sorted(kinds) == ["Job", "PersistentVolumeClaim"]


def test_daskcluster_validates_against_the_operator_crd_and_its_pods_as_pods():
    cluster = next(d for d in _documents() if d["kind"] == "DaskCluster")
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    jsonschema.validate({k: v for k, v in cluster.items() if k not in ("apiVersion", "kind", "metadata")},
                        _crd_schema())
    for role in ("scheduler", "worker"):
        _k8s_validate(_as_pod(cluster["spec"][role]["spec"], role))
    service = cluster["spec"]["scheduler"]["service"]
    _k8s_validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "calengine-scheduler"},
                   "spec": service})
    assert service["type"] == "ClusterIP"


def test_the_crd_check_catches_a_misspelt_field():
    """The jsonschema check is real: a typo the API server would prune is refused."""
    cluster = next(d for d in _documents() if d["kind"] == "DaskCluster")
    bad = copy.deepcopy(cluster["spec"])
    bad["worker"]["replica"] = bad["worker"].pop("replicas")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": bad}, _crd_schema())
    pod = copy.deepcopy(cluster["spec"]["worker"]["spec"])
    pod["containers"][0]["volumeMount"] = pod["containers"][0].pop("volumeMounts")
    with pytest.raises(kubernetes_validate.ValidationError):
        _k8s_validate(_as_pod(pod))


def _arg(args, flag):
    return args[args.index(flag) + 1]


def test_cluster_commands_are_tls_consistent_and_exist():
    docs = _documents()
    cluster = next(d for d in docs if d["kind"] == "DaskCluster")
    sched = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    worker = cluster["spec"]["worker"]["spec"]["containers"][0]
    check_dask_command(sched["args"])
    check_dask_command(worker["args"])
    address = f"tls://{cluster['metadata']['name']}-scheduler:{cluster['spec']['scheduler']['service']['ports'][0]['port']}"
    assert _arg(sched["args"], "--protocol") == "tls"
    assert worker["args"][2] == address
    assert {"name": "DASK_SCHEDULER_ADDRESS", "value": address} in worker["env"]
    # Dask's memory limit is the container's; one thread per worker
    assert _arg(worker["args"], "--memory-limit") == worker["resources"]["limits"]["memory"]
    assert _arg(worker["args"], "--nthreads") == "1"
    job = next(d for d in docs if d["kind"] == "Job")
    fit = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert fit[:3] == ["calengine", "--quiet", "fit"] and _arg(fit, "--cluster") == address
    for c in (sched, worker):
        for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
            assert _arg(c["args"], flag).startswith("/etc/calengine/tls/")
    # the Job's arguments parse with calengine's own parser
    from calengine.cli import build_parser

    args = build_parser().parse_args(fit[1:])
    assert args.command == "fit" and args.tls_key and args.json_log
    # the data and the model are on the volume the workers mount at the same path
    mounts = {m["mountPath"] for m in cluster["spec"]["worker"]["spec"]["containers"][0]["volumeMounts"]}
    assert "/data" in mounts and args.data.startswith("/data/") and args.output.startswith("/data/")


# Every key of the chart's values that deploy/helm/values.yaml sets, as read by the templates of
# dask/helm-chart (dask/templates/*.yaml at commit e25bf5116067684b0ca2f99924b3f0b183c2dcfd, chart
# appVersion 2025.11.0).  Helm ignores unknown keys silently: a typo would simply not apply.
CHART_KEYS = {
    "fullnameOverride", "nameOverride",
    "scheduler.image.repository", "scheduler.image.tag", "scheduler.image.pullPolicy", "scheduler.serviceType",
    "scheduler.extraArgs", "scheduler.env", "scheduler.resources", "scheduler.securityContext",
    "scheduler.servicePort", "scheduler.enabled",
    "webUI.ingress.enabled", "webUI.servicePort",
    "worker.image.repository", "worker.image.tag", "worker.image.pullPolicy", "worker.image.dask_worker",
    "worker.replicas", "worker.custom_scheduler_url", "worker.threads_per_worker", "worker.resources",
    "worker.env", "worker.mounts.volumes", "worker.mounts.volumeMounts", "worker.securityContext",
    "worker.portDashboard", "worker.extraArgs",
    "jupyter.enabled",
}
LEAVES = {"scheduler.extraArgs", "scheduler.env", "scheduler.resources", "scheduler.securityContext",
          "worker.resources", "worker.env", "worker.mounts.volumes", "worker.mounts.volumeMounts",
          "worker.securityContext", "worker.extraArgs"}


def _keys(node, prefix=""):
    for k, v in node.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and path not in LEAVES:
            yield from _keys(v, path + ".")
        else:
            yield path


def _chart_pods(values: dict) -> dict[str, dict]:
    """The scheduler and worker pod specs dask/dask's templates build from these values (the parts
    that come from values; labels and names aside), and the argv each container runs."""
    s, w = values["scheduler"], values["worker"]
    sched_args = ["dask-scheduler", "--port=8786", "--dashboard-address=:8787", *s.get("extraArgs", [])]
    limits = w.get("resources", {}).get("limits", {})
    worker_args = ["dask-worker", w.get("custom_scheduler_url") or f"{values['fullnameOverride']}-scheduler:8786"]
    if limits:
        worker_args += ["--nthreads", str(w.get("threads_per_worker") or limits.get("cpu")),
                        "--memory-limit", str(limits.get("memory"))]
    worker_args += ["--no-dashboard", "--dashboard-address", "8790", *w.get("extraArgs", [])]
    sched_pod = {"containers": [{"name": "scheduler", "image": f"{s['image']['repository']}:{s['image']['tag']}",
                                 "args": sched_args, "resources": s["resources"], "env": s["env"],
                                 "ports": [{"containerPort": 8786}, {"containerPort": 8787}]}],
                 "securityContext": s["securityContext"]}
    worker_pod = {"volumes": w["mounts"]["volumes"],
                  "containers": [{"name": "worker", "image": f"{w['image']['repository']}:{w['image']['tag']}",
                                  "args": worker_args, "resources": w["resources"], "env": w["env"],
                                  "volumeMounts": w["mounts"]["volumeMounts"],
                                  "ports": [{"containerPort": 8790, "name": "dashboard"}]}],
                  "securityContext": w["securityContext"]}
    return {"scheduler": sched_pod, "worker": worker_pod}


def test_helm_values_use_only_keys_the_chart_reads():
    values = yaml.safe_load(VALUES.read_text())
    unknown = sorted(set(_keys(values)) - CHART_KEYS)
    assert not unknown, f"keys the dask/dask chart does not read (ignored by helm): {unknown}"


def test_helm_values_give_valid_pods_and_consistent_worker_settings():
    values = yaml.safe_load(VALUES.read_text())
    pods = _chart_pods(values)
    for role, pod in pods.items():
        _k8s_validate(_as_pod(pod, role))
    # the chart's legacy command names, run through the image's shim, are valid two-word commands
    sched_args = pods["scheduler"]["containers"][0]["args"]
    worker_args = pods["worker"]["containers"][0]["args"]
    check_dask_command(["dask", "scheduler", *sched_args[1:]])
    check_dask_command(["dask", "worker", *worker_args[1:]])
    assert values["worker"]["image"]["dask_worker"] == "dask-worker"
    assert _arg(sched_args, "--protocol") == "tls"
    assert worker_args[1] == f"tls://{values['fullnameOverride']}-scheduler:8786"
    assert _arg(worker_args, "--nthreads") == "1"
    assert _arg(worker_args, "--memory-limit") == values["worker"]["resources"]["limits"]["memory"]
    from dask.utils import parse_bytes

    assert parse_bytes(_arg(worker_args, "--memory-limit")) == 4 * 2**30  # Dask reads Kubernetes' "4Gi"
    # TLS material for scheduler and workers from the same Secret; nothing public
    for role in ("scheduler", "worker"):
        names = {e["name"] for e in values[role]["env"]}
        assert {"CALENGINE_TLS_CA", "CALENGINE_TLS_CERT", "CALENGINE_TLS_KEY"} <= names
    assert values["scheduler"]["serviceType"] == "ClusterIP"
    assert values["webUI"]["ingress"]["enabled"] is False
    assert values["jupyter"]["enabled"] is False


def test_the_images_in_every_manifest_are_the_one_the_compose_file_builds():
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    image = compose["services"]["scheduler"]["image"]
    values = yaml.safe_load(VALUES.read_text())
    for role in ("scheduler", "worker"):
        assert f"{values[role]['image']['repository']}:{values[role]['image']['tag']}" == image
    for doc in _documents():
        text = yaml.safe_dump(doc)
        for line in text.splitlines():
            if line.strip().startswith("image:"):
                assert line.split("image:")[1].strip() == image, line
