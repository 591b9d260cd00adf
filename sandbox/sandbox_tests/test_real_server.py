"""Behaviours a real kube-apiserver has that clients observe: DELETE answers, create-time defaults, error
bodies,
metadata normalisation, label validation and the kinds a common client suite touches."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import kubernetes
import pytest

from ansible_operator_sandbox.testing import SandboxHandle

POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
def api(sandbox: SandboxHandle):
    client = sandbox.api_client()
    yield client
    client.close()


def _raw(sandbox: SandboxHandle, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, bytes, str]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(sandbox.url + path, data=data, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def test_delete_returns_the_object_for_kinds_whose_registry_does(api, sandbox):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod("default", POD)
    gone = core.delete_namespaced_pod("p", "default")
    assert isinstance(gone, kubernetes.client.V1Pod) and gone.metadata.name == "p"
    core.create_namespaced_service_account("default", {"metadata": {"name": "sa1"}})
    assert core.delete_namespaced_service_account("sa1", "default").kind == "ServiceAccount"
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    code, body, _ = _raw(sandbox, "DELETE", "/api/v1/namespaces/default/configmaps/cm")
    status = json.loads(body)
    assert code == 200 and status["kind"] == "Status" and status["status"] == "Success"
    assert list(status["details"]) == ["name", "kind", "uid"]  # no empty group for the core group
    assert status["details"]["kind"] == "configmaps"


def test_error_status_body_is_byte_compatible(sandbox):
    code, body, ctype = _raw(sandbox, "GET", "/api/v1/namespaces/default/configmaps/nope")
    assert code == 404 and ctype.startswith("application/json")
    assert body == (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":'
                    b'"configmaps \\"nope\\" not found","reason":"NotFound","details":{"name":"nope",'
                    b'"kind":"configmaps"},"code":404}\n')
    code, body, _ = _raw(sandbox, "GET", "/apis/apps/v1/namespaces/default/deployments/nope")
    assert list(json.loads(body)["details"]) == ["name", "group", "kind"]


def test_pod_create_time_defaults(api):
    core = kubernetes.client.CoreV1Api(api)
    pod = core.create_namespaced_pod("default", POD)
    assert pod.status.phase == "Pending" and pod.status.qos_class == "BestEffort"
    assert pod.spec.service_account_name == "default" and pod.spec.restart_policy == "Always"
    assert pod.spec.dns_policy == "ClusterFirst" and pod.spec.termination_grace_period_seconds == 30
    c = pod.spec.containers[0]
    assert c.image_pull_policy == "Always" and c.termination_message_path == "/dev/termination-log"
    assert {t.key for t in pod.spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert pod.metadata.generation == 1  # since 1.33 (PodObservedGenerationTracking)
    # the ServiceAccount admission plugin's projected token volume, mounted in every container
    volume = next(v for v in pod.spec.volumes if v.name.startswith("kube-api-access-"))
    assert [s.config_map.name for s in volume.projected.sources if s.config_map] == ["kube-root-ca.crt"]
    assert [(m.name, m.mount_path, m.read_only) for m in c.volume_mounts] == [
        (volume.name, "/var/run/secrets/kubernetes.io/serviceaccount", True)]
    guaranteed = core.create_namespaced_pod("default", {"metadata": {"name": "g"}, "spec": {"containers": [
        {"name": "c", "image": "busybox:1.36", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}})
    assert guaranteed.status.qos_class == "Guaranteed"
    assert guaranteed.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert guaranteed.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}
    burstable = core.create_namespaced_pod("default", {"metadata": {"name": "b"}, "spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}})
    assert burstable.status.qos_class == "Burstable"


def test_generation_only_on_kinds_that_keep_one(api):
    core = kubernetes.client.CoreV1Api(api)
    assert core.read_namespace("default").metadata.generation is None
    s = core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "string_data": {"a": "b"}})
    assert s.metadata.generation is None
    apps = kubernetes.client.AppsV1Api(api)
    d = apps.create_namespaced_deployment(
        "default",
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    assert d.metadata.generation == 1
    # pod template defaults are applied as the registry does
    assert d.spec.template.spec.restart_policy == "Always"
    assert d.spec.template.spec.containers[0].termination_message_policy == "File"


def test_empty_metadata_lists_are_omitted(api):
    core = kubernetes.client.CoreV1Api(api)
    cm = api.sanitize_for_serialization(core.create_namespaced_config_map(
        "default", {"metadata": {"name": "e", "finalizers": [], "labels": {}, "annotations": {}}}))
    assert not {"finalizers", "labels", "annotations"} & set(cm["metadata"])


@pytest.mark.parametrize(
    "labels,message",
    [
        (
            {"a b": "x"},
            'ConfigMap "l" is invalid: metadata.labels: Invalid value: "a b": name part must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            {"ok": "-bad"},
            'ConfigMap "l" is invalid: metadata.labels: Invalid value: "-bad": a valid label must be an '
            "empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
            "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            {"x" * 64: "v"},
            'ConfigMap "l" is invalid: metadata.labels: Invalid value: "'
            + "x" * 64
            + '": name part must be no more than 63 characters',
        ),
        (
            {"Bad_Prefix/name": "v"},
            'ConfigMap "l" is invalid: metadata.labels: Invalid value: "Bad_Prefix/name": '
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'example.com', regex used for validation is "
            r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
    ],
)
def test_label_validation_messages(api, labels, message):
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.create_namespaced_config_map("default", {"metadata": {"name": "l", "labels": labels}})
    assert e.value.status == 422
    body = json.loads(e.value.body)
    assert body["message"] == message and body["details"]["causes"][0]["field"] == "metadata.labels"


def test_annotations_total_size_limit(api):
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.create_namespaced_config_map("default", {"metadata": {"name": "big", "annotations": {
            "a": "x" * (256 * 1024)}}})
    assert e.value.status == 422
    assert (
        "metadata.annotations: Too long: may not be more than 262144 bytes"
        in json.loads(e.value.body)["message"]
    )


def test_kinds_a_client_suite_touches(api):
    core = kubernetes.client.CoreV1Api(api)
    rc = core.create_namespaced_replication_controller("default", {"metadata": {"name": "rc"}, "spec": {
        "replicas": 2, "template": {"metadata": {"labels": {"app": "rc"}},
                                    "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    assert (
        rc.spec.selector == {"app": "rc"} and rc.metadata.labels == {"app": "rc"} and rc.status.replicas == 0
    )
    sched = kubernetes.client.SchedulingV1Api(api)
    pc = sched.create_priority_class({"metadata": {"name": "high"}, "value": 1000})
    assert pc.preemption_policy == "PreemptLowerPriority"
    with pytest.raises(kubernetes.client.ApiException) as e:
        sched.create_priority_class({"metadata": {"name": "novalue"}})
    assert e.value.status == 422
    reg = kubernetes.client.ApiregistrationV1Api(api)
    svc = reg.create_api_service({"metadata": {"name": "v1.example.com"}, "spec": {
        "group": "example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10}})
    assert svc.metadata.name == "v1.example.com"
    net = kubernetes.client.NetworkingV1Api(api)
    net.create_ingress_class({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}})
    disc = kubernetes.client.DiscoveryV1Api(api)
    es = disc.create_namespaced_endpoint_slice("default", {"metadata": {"name": "es"}, "addressType": "IPv4",
                                                           "endpoints": [{"addresses": ["10.0.0.9"]}]})
    assert es.metadata.generation == 1
    assert [i.metadata.name for i in net.list_ingress_class().items] == ["nginx"]


def test_request_limits_have_the_real_codes(sandbox):
    path = "/api/v1/namespaces/default/configmaps"
    big = {"metadata": {"name": "big"}, "data": {"a": "x" * (4 * 1024 * 1024)}}
    code, body, _ = _raw(sandbox, "POST", path, big)
    assert code == 413 and json.loads(body)["message"] == "Request entity too large: limit is 3145728"
    code, body, _ = _raw(sandbox, "POST", path, b'{"metadata": {"name": "t"}}', "text/plain")
    assert code == 415 and json.loads(body)["reason"] == "UnsupportedMediaType"
    for depth in (300, 100_000):  # deeper than the limit, and deeper than Python's own recursion limit
        raw = b'{"metadata": {"name": "deep"}, "data": {"a": ' + b"[" * depth + b"]" * depth + b"}}"
        code, body, _ = _raw(sandbox, "POST", path, raw)
        assert code == 400 and json.loads(body)["reason"] == "BadRequest", body[:200]
    assert (
        "exceeded max depth"
        in json.loads(_raw(sandbox, "POST", path, b'{"data": ' + b"[" * 300 + b"]" * 300 + b"}")[1])[
            "message"
        ]
    )


def test_container_subresources_say_no_containers_run(api, sandbox):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_pod("default", POD)
    for method, sub in (("GET", "log"), ("POST", "exec"), ("POST", "attach"), ("POST", "portforward")):
        code, body, _ = _raw(sandbox, method, f"/api/v1/namespaces/default/pods/p/{sub}")
        status = json.loads(body)
        assert code == 400, (sub, status)
        assert status["message"] == (
            f'pods/{sub} of pod "p" is not supported by the sandbox: no containers run '
            "(no kubelet, no container runtime)"
        )
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.read_namespaced_pod_log("p", "default")
    assert e.value.status == 400 and "no containers run" in e.value.body
    code, _, _ = _raw(sandbox, "GET", "/api/v1/namespaces/default/pods/missing/log")
    assert code == 404
    code, _, _ = _raw(sandbox, "GET", "/api/v1/namespaces/default/pods/p/nonsense")
    assert code == 404


def test_job_and_service_registry_defaults(api):
    batch = kubernetes.client.BatchV1Api(api)
    job = batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels == {
        "batch.kubernetes.io/controller-uid": uid,
        "controller-uid": uid,
        "batch.kubernetes.io/job-name": "j",
        "job-name": "j",
    }
    assert job.spec.completion_mode == "NonIndexed" and job.spec.suspend is False
    # updating with the template as first sent is no change to the (immutable) template
    batch.patch_namespaced_job("j", "default", {"metadata": {"labels": {"x": "y"}}})
    core = kubernetes.client.CoreV1Api(api)
    svc = core.create_namespaced_service(
        "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    )
    assert svc.spec.ip_families == ["IPv4"] and svc.spec.ip_family_policy == "SingleStack"
    assert svc.spec.internal_traffic_policy == "Cluster"


def test_empty_optional_lists_and_maps_are_not_stored(api):
    apps = kubernetes.client.AppsV1Api(api)
    d = api.sanitize_for_serialization(apps.create_namespaced_deployment("default", {
        "metadata": {"name": "empty"}, "spec": {
            "selector": {"matchLabels": {"app": "e"}},
            "template": {"metadata": {"labels": {"app": "e"}, "annotations": {}}, "spec": {
                "containers": [{"name": "c", "image": "x", "ports": [], "env": [], "args": []}],
                "volumes": [], "nodeSelector": {}, "securityContext": {}}}}}))
    pod_spec = d["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert not {"ports", "env", "args"} & set(container)
    assert "volumes" not in pod_spec and "nodeSelector" not in pod_spec
    assert pod_spec["securityContext"] == {}  # a struct, serialized even when empty
    assert "annotations" not in d["spec"]["template"]["metadata"]
    disc = kubernetes.client.DiscoveryV1Api(api)
    es = disc.create_namespaced_endpoint_slice(
        "default", {"metadata": {"name": "none"}, "addressType": "IPv4", "endpoints": []}
    )
    assert es.endpoints == []  # a required field: kept
