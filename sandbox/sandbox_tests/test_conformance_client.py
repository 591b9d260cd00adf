"""The ``kubernetes`` Python client's typed API against every built-in kind the sandbox serves.

For each kind: create, get, list, watch, patch with each patch type (JSON patch, merge patch, strategic merge
patch where the kind allows it, server-side apply), delete and deletecollection, through the generated typed
methods (and their models: a response the model cannot hold fails the test), asserting what a real server
does:
201 on create, uid/resourceVersion/creationTimestamp set, generation only on kinds that keep one, the object
or a
``Status`` on delete as the kind's registry returns, the watch's ADDED event, deletecollection by label.
One sandbox serves the whole module.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import kubernetes
import pytest

from ansible_operator_sandbox.api import RETURNS_DELETED_OBJECT
from ansible_operator_sandbox.testing import SandboxHandle, call_api, start_in_thread

NS = "conformance"
POD_SPEC = {"containers": [{"name": "c", "image": "busybox:1.36"}]}
TEMPLATE = {"metadata": {"labels": {"app": "conf"}}, "spec": POD_SPEC}
SELECTOR = {"matchLabels": {"app": "conf"}}
CSR_PEM = base64.b64encode(
    b"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
).decode()


@dataclass(frozen=True)
class Kind:
    api: str  # kubernetes.client class name
    method: str  # the typed methods' suffix, e.g. "config_map"
    group_resource: str
    body: dict[str, Any] = field(default_factory=dict)
    namespaced: bool = True
    generation: bool = False
    deletecollection: bool = True

    @property
    def id(self) -> str:
        return self.group_resource


KINDS = [
    Kind("CoreV1Api", "config_map", "/configmaps", {"data": {"k": "v"}}),
    Kind("CoreV1Api", "secret", "/secrets", {"stringData": {"k": "v"}}),
    Kind("CoreV1Api", "service", "/services", {"spec": {"ports": [{"port": 80}]}}),
    Kind("CoreV1Api", "service_account", "/serviceaccounts"),
    Kind(
        "CoreV1Api",
        "persistent_volume_claim",
        "/persistentvolumeclaims",
        {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    ),
    Kind(
        "CoreV1Api",
        "persistent_volume",
        "/persistentvolumes",
        {
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/x"},
            }
        },
        namespaced=False,
    ),
    Kind("CoreV1Api", "pod", "/pods", {"spec": POD_SPEC}, generation=True),  # since 1.33
    Kind(
        "CoreV1Api",
        "event",
        "/events",
        {"involvedObject": {"kind": "Pod", "name": "p", "namespace": NS}, "reason": "Test", "message": "m"},
    ),
    Kind("CoreV1Api", "endpoints", "/endpoints", {"subsets": [{"addresses": [{"ip": "10.0.0.5"}]}]}),
    Kind("CoreV1Api", "node", "/nodes", namespaced=False),
    Kind("CoreV1Api", "resource_quota", "/resourcequotas", {"spec": {"hard": {"pods": "10"}}}),
    Kind("CoreV1Api", "limit_range", "/limitranges", {"spec": {"limits": [{"type": "Container"}]}}),
    Kind(
        "CoreV1Api",
        "replication_controller",
        "/replicationcontrollers",
        {"spec": {"template": TEMPLATE}},
        generation=True,
    ),
    Kind("CoreV1Api", "pod_template", "/podtemplates", {"template": TEMPLATE}, generation=True),
    Kind("CoreV1Api", "namespace", "/namespaces", namespaced=False, deletecollection=False),
    Kind(
        "AppsV1Api",
        "deployment",
        "apps/deployments",
        {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
        generation=True,
    ),
    Kind(
        "AppsV1Api",
        "stateful_set",
        "apps/statefulsets",
        {"spec": {"selector": SELECTOR, "template": TEMPLATE, "serviceName": "s"}},
        generation=True,
    ),
    Kind(
        "AppsV1Api",
        "replica_set",
        "apps/replicasets",
        {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
        generation=True,
    ),
    Kind(
        "AppsV1Api",
        "daemon_set",
        "apps/daemonsets",
        {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
        generation=True,
    ),
    Kind("AppsV1Api", "controller_revision", "apps/controllerrevisions", {"revision": 1, "data": {}}),
    Kind(
        "BatchV1Api",
        "job",
        "batch/jobs",
        {"spec": {"template": dict(TEMPLATE, spec=dict(POD_SPEC, restartPolicy="Never"))}},
        generation=True,
    ),
    Kind(
        "BatchV1Api",
        "cron_job",
        "batch/cronjobs",
        {
            "spec": {
                "schedule": "0 0 1 1 *",
                "jobTemplate": {
                    "spec": {"template": dict(TEMPLATE, spec=dict(POD_SPEC, restartPolicy="Never"))}
                },
            }
        },
        generation=True,
    ),
    Kind(
        "EventsV1Api",
        "event",
        "events.k8s.io/events",
        {
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "c",
            "reportingInstance": "i",
            "action": "A",
            "reason": "R",
            "type": "Normal",
        },
    ),
    Kind("CoordinationV1Api", "lease", "coordination.k8s.io/leases", {"spec": {"holderIdentity": "me"}}),
    Kind(
        "RbacAuthorizationV1Api",
        "role",
        "rbac.authorization.k8s.io/roles",
        {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
    ),
    Kind(
        "RbacAuthorizationV1Api",
        "role_binding",
        "rbac.authorization.k8s.io/rolebindings",
        {
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
        },
    ),
    Kind(
        "RbacAuthorizationV1Api",
        "cluster_role",
        "rbac.authorization.k8s.io/clusterroles",
        {"rules": []},
        namespaced=False,
    ),
    Kind(
        "RbacAuthorizationV1Api",
        "cluster_role_binding",
        "rbac.authorization.k8s.io/clusterrolebindings",
        {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}},
        namespaced=False,
    ),
    Kind(
        "NetworkingV1Api",
        "ingress",
        "networking.k8s.io/ingresses",
        {"spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}},
        generation=True,
    ),
    Kind(
        "NetworkingV1Api",
        "network_policy",
        "networking.k8s.io/networkpolicies",
        {"spec": {"podSelector": {}}},
        generation=True,
    ),
    Kind(
        "NetworkingV1Api",
        "ingress_class",
        "networking.k8s.io/ingressclasses",
        {"spec": {"controller": "example.com/ingress"}},
        namespaced=False,
    ),
    Kind(
        "PolicyV1Api",
        "pod_disruption_budget",
        "policy/poddisruptionbudgets",
        {"spec": {"minAvailable": 1, "selector": SELECTOR}},
        generation=True,
    ),
    Kind(
        "AutoscalingV2Api",
        "horizontal_pod_autoscaler",
        "autoscaling/horizontalpodautoscalers",
        {
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "maxReplicas": 3,
            }
        },  # no generation: the real 1.36 server sets none (tests/differential, deployment_rollout)
    ),
    Kind(
        "StorageV1Api",
        "storage_class",
        "storage.k8s.io/storageclasses",
        {"provisioner": "example.com/p"},
        namespaced=False,
    ),
    Kind(
        "StorageV1Api",
        "volume_attachment",
        "storage.k8s.io/volumeattachments",
        {
            "spec": {
                "attacher": "example.com/a",
                "nodeName": "sandbox-node",
                "source": {"persistentVolumeName": "pv"},
            }
        },
        namespaced=False,
    ),
    Kind("StorageV1Api", "csi_driver", "storage.k8s.io/csidrivers", {"spec": {}}, namespaced=False),
    Kind(
        "StorageV1Api",
        "csi_node",
        "storage.k8s.io/csinodes",
        {"spec": {"drivers": [{"name": "example.com/d", "nodeID": "n1"}]}},
        namespaced=False,
    ),
    Kind(
        "DiscoveryV1Api",
        "endpoint_slice",
        "discovery.k8s.io/endpointslices",
        {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.7"]}]},
        generation=True,
    ),
    Kind(
        "SchedulingV1Api",
        "priority_class",
        "scheduling.k8s.io/priorityclasses",
        {"value": 100},
        namespaced=False,
        generation=True,
    ),
    Kind("NodeV1Api", "runtime_class", "node.k8s.io/runtimeclasses", {"handler": "runc"}, namespaced=False),
    Kind(
        "FlowcontrolApiserverV1Api",
        "flow_schema",
        "flowcontrol.apiserver.k8s.io/flowschemas",
        {"spec": {"priorityLevelConfiguration": {"name": "global-default"}}},
        namespaced=False,
        generation=True,
    ),
    Kind(
        "FlowcontrolApiserverV1Api",
        "priority_level_configuration",
        "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations",
        {"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}},
        namespaced=False,
        generation=True,
    ),
    Kind(
        "CertificatesV1Api",
        "certificate_signing_request",
        "certificates.k8s.io/certificatesigningrequests",
        {"spec": {"request": CSR_PEM, "signerName": "example.com/signer", "usages": ["client auth"]}},
        namespaced=False,
    ),
    Kind(
        "AdmissionregistrationV1Api",
        "validating_webhook_configuration",
        "admissionregistration.k8s.io/validatingwebhookconfigurations",
        namespaced=False,
        generation=True,
    ),
    Kind(
        "AdmissionregistrationV1Api",
        "mutating_webhook_configuration",
        "admissionregistration.k8s.io/mutatingwebhookconfigurations",
        namespaced=False,
        generation=True,
    ),
    Kind(
        "ApiregistrationV1Api",
        "api_service",
        "apiregistration.k8s.io/apiservices",
        {
            "spec": {
                "group": "conformance.example.com",
                "version": "v1",
                "groupPriorityMinimum": 100,
                "versionPriority": 10,
            }
        },
        namespaced=False,
    ),
    Kind(
        "ApiextensionsV1Api",
        "custom_resource_definition",
        "apiextensions.k8s.io/customresourcedefinitions",
        {
            "spec": {
                "group": "conformance.example.com",
                "scope": "Namespaced",
                "names": {"kind": "Thing", "plural": "things"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            }
        },
        namespaced=False,
        generation=True,
    ),
]
#: where the object's name must have a special shape
NAMES = {"apiregistration.k8s.io/apiservices": "v1.conformance.example.com",
         "apiextensions.k8s.io/customresourcedefinitions": "things.conformance.example.com"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubernetes.client.ApiClient]:
    handle: SandboxHandle = start_in_thread(Path(tmp_path_factory.mktemp("conformance")) / "kubeconfig")
    api = handle.api_client()
    kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    try:
        yield api
    finally:
        api.close()
        handle.sandbox.stop_thread()


class Typed:
    """The generated methods of one kind: create/read/list/patch/delete/delete_collection(+namespaced)."""

    def __init__(self, api: kubernetes.client.ApiClient, kind: Kind) -> None:
        self.obj = getattr(kubernetes.client, kind.api)(api)
        self.kind = kind
        self.api = api

    def create(self, body: dict[str, Any]) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"create_namespaced_{self.kind.method}")(NS, body)
        return getattr(self.obj, f"create_{self.kind.method}")(body)

    def patch(self, name: str, body: Any) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"patch_namespaced_{self.kind.method}")(name, NS, body)
        return getattr(self.obj, f"patch_{self.kind.method}")(name, body)

    def list(self, **kwargs: Any) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"list_namespaced_{self.kind.method}")(NS, **kwargs)
        return getattr(self.obj, f"list_{self.kind.method}")(**kwargs)

    def list_fn(self) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"list_namespaced_{self.kind.method}")
        return getattr(self.obj, f"list_{self.kind.method}")

    def delete(self, name: str) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"delete_namespaced_{self.kind.method}")(name, NS)
        return getattr(self.obj, f"delete_{self.kind.method}")(name)

    def delete_collection(self, **kwargs: Any) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"delete_collection_namespaced_{self.kind.method}")(NS, **kwargs)
        return getattr(self.obj, f"delete_collection_{self.kind.method}")(**kwargs)

    def path(self, name: str) -> str:
        group, _, plural = self.kind.group_resource.partition("/")
        version = _version(group)
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        ns = f"/namespaces/{NS}" if self.kind.namespaced else ""
        return f"{base}{ns}/{plural}/{name}"

    def raw_patch(self, name: str, body: Any, content_type: str, **query: str) -> Any:
        model = type(self.read(name)).__name__
        return call_api(self.api, "PATCH", self.path(name), body, content_type=content_type,
                        query=query.items(), response_type=model)

    def read(self, name: str) -> Any:
        if self.kind.namespaced:
            return getattr(self.obj, f"read_namespaced_{self.kind.method}")(name, NS)
        return getattr(self.obj, f"read_{self.kind.method}")(name)


def _get(obj: Any, key: str) -> Any:
    """A field of a model or of a plain dict (client 37 hands back a Status from DELETE untyped)."""
    return obj[key] if isinstance(obj, dict) else getattr(obj, key)


def _version(group: str) -> str:
    return "v2" if group == "autoscaling" else "v1"


def _body(kind: Kind, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {"conformance": "yes"})}
    return {"metadata": meta, **kind.body}


@pytest.mark.parametrize("kind", KINDS, ids=[k.id for k in KINDS])
def test_typed_client_verbs(client: kubernetes.client.ApiClient, kind: Kind) -> None:
    typed = Typed(client, kind)
    name = NAMES.get(kind.group_resource, f"conf-{kind.method.replace('_', '-')}")
    before = typed.list().metadata.resource_version
    created = typed.create(_body(kind, name))
    meta = created.metadata
    assert meta.name == name and meta.uid and meta.resource_version and meta.creation_timestamp
    assert (meta.generation == 1) if kind.generation else meta.generation is None
    assert meta.managed_fields and meta.managed_fields[0].operation == "Update"
    got = typed.read(name)
    assert got.metadata.uid == meta.uid and got.kind and got.api_version
    listed = typed.list(label_selector="conformance=yes")
    assert name in [i.metadata.name for i in listed.items]
    assert int(listed.metadata.resource_version) >= int(meta.resource_version)
    # watch from before the create: the ADDED event arrives, typed
    watch = kubernetes.watch.Watch()
    for event in watch.stream(typed.list_fn(), *([NS] if kind.namespaced else []), resource_version=before,
                              timeout_seconds=10):
        if event["type"] == "ADDED" and event["object"].metadata.name == name:
            assert event["object"].metadata.uid == meta.uid
            watch.stop()
    # one label per patch type; each is visible after it
    patched = typed.patch(name, [{"op": "add", "path": "/metadata/labels/json", "value": "1"}])
    assert patched.metadata.labels["json"] == "1"
    patched = typed.patch(name, {"metadata": {"labels": {"strategic": "1"}}})
    assert patched.metadata.labels["strategic"] == "1"
    patched = typed.raw_patch(name, {"metadata": {"labels": {"merge": "1"}}}, "application/merge-patch+json")
    assert patched.metadata.labels["merge"] == "1"
    group, _, _ = kind.group_resource.partition("/")
    applied = typed.raw_patch(name, {"apiVersion": f"{group}/{_version(group)}" if group else "v1",
                                     "kind": type(got).__name__.removeprefix("V1").removeprefix("V2")
                                     .removeprefix("CoreV1").removeprefix("EventsV1"),
                                     "metadata": {"name": name, "labels": {"apply": "1"}}},
                              "application/apply-patch+yaml", fieldManager="conformance")
    assert applied.metadata.labels["apply"] == "1" and applied.metadata.labels["json"] == "1"
    assert any(e.manager == "conformance" and e.operation == "Apply" for e in applied.metadata.managed_fields)
    # delete: the object where the registry returns it, else a Status (Namespaces and CRDs finalize first)
    gone = typed.delete(name)
    if kind.group_resource in RETURNS_DELETED_OBJECT:  # typed as the object by the published OpenAPI
        assert gone.metadata.name == name and gone.metadata.uid == meta.uid
    elif kind.group_resource in ("/namespaces", "apiextensions.k8s.io/customresourcedefinitions"):
        assert _get(gone, "kind") == got.kind  # still finalizing: the object (typed V1Status by the client)
    else:
        assert _get(gone, "kind") == "Status" and _get(gone, "status") == "Success"
        assert _get(_get(gone, "details"), "name") == name
    if not kind.deletecollection:
        return
    for i in range(2):
        typed.create(_body(kind, f"{name}-{i}" if kind.group_resource not in NAMES else name + str(i),
                                   {"sweep": "yes"}) if kind.group_resource not in NAMES else
                   _body(kind, name, {"sweep": "yes"}))
        if kind.group_resource in NAMES:
            break  # names are tied to the spec: one object is enough
    typed.delete_collection(label_selector="sweep=yes")
    from ansible_operator_sandbox.testing import wait_for
    wait_for(lambda: not typed.list(label_selector="sweep=yes").items, what="deletecollection")
