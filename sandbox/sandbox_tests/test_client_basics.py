"""The kubernetes Python client (typed APIs and DynamicClient) against the sandbox: CRUD and errors."""

from __future__ import annotations

import json
import urllib.request

import kubernetes
import pytest
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import install_crd, wait_for, widget


@pytest.fixture
def api(sandbox: SandboxHandle) -> kubernetes.client.ApiClient:
    client = sandbox.api_client()
    yield client
    client.close()


def test_configmap_crud(api):
    core = kubernetes.client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm1", "labels": {"a": "1"}},
                                                       "data": {"k": "v"}})
    # ConfigMaps have no metadata.generation on a real server (their registry strategy sets none)
    assert cm.metadata.uid and cm.metadata.resource_version and cm.metadata.generation is None
    got = core.read_namespaced_config_map("cm1", "default")
    assert got.data == {"k": "v"}
    got.data["k"] = "w"
    updated = core.replace_namespaced_config_map("cm1", "default", got)
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("cm1", "default", got)  # stale resourceVersion
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm1"}})
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    core.delete_namespaced_config_map("cm1", "default")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("cm1", "default")
    assert e.value.status == 404


def test_deployment_becomes_available(api):
    apps = kubernetes.client.AppsV1Api(api)
    body = {"metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    apps.create_namespaced_deployment("default", body)
    dep = wait_for(
        lambda: (d := apps.read_namespaced_deployment("web", "default")).status.available_replicas == 2 and d
    )
    assert dep.status.observed_generation == dep.metadata.generation
    assert any(c.type == "Available" and c.status == "True" for c in dep.status.conditions)


def test_dynamic_client_custom_resource(api):
    install_crd(api)
    dyn = DynamicClient(api)
    widgets = dyn.resources.get(api_version="test.example.com/v1", kind="Widget")
    obj = widgets.create(
        body={
            "apiVersion": "test.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 2, "unknown": 1},
        },
        namespace="default",
    )
    assert obj.spec.color == "blue"  # defaulted
    assert "unknown" not in obj.spec  # pruned
    with pytest.raises(kubernetes.dynamic.exceptions.UnprocessibleEntityError) as e:
        widgets.create(body={"apiVersion": "test.example.com/v1", "kind": "Widget",
                             "metadata": {"name": "w2"}, "spec": {"size": 0}}, namespace="default")
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid" and status["details"]["causes"][0]["field"] == "spec.size"
    listed = widgets.get(namespace="default")
    assert [i.metadata.name for i in listed.items] == ["w1"]


def _raw(api, method: str, path: str, body=None, content_type: str = "application/json", query=None):
    """A raw HTTP request (bodies sent exactly as given): (status, decoded JSON body)."""
    import urllib.error
    from urllib.parse import urlencode

    url = api.configuration.host + path + ("?" + urlencode(query) if query else "")
    data = None
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": content_type, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_error_status_objects(api):
    status, body = _raw(api, "POST", "/api/v1/namespaces/default/configmaps", body="{not json")
    assert status == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    status, body = _raw(api, "GET", "/apis/apps/v9/things")  # a served group's unknown version: a Status
    assert status == 404 and body["reason"] == "NotFound"
    status, body = _raw(api, "GET", "/api/v1/namespaces/default/nonsense")
    assert status == 404
    status, body = _raw(api, "PUT", "/api/v1/namespaces/default/configmaps", body={})
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body = _raw(
        api, "GET", "/api/v1/namespaces/default/configmaps", query={"labelSelector": "a in ("}
    )
    assert status == 400
    status, body = _raw(api, "POST", "/api/v1/namespaces/default/configmaps",
                        body={"metadata": {"name": "x"}, "data": {"n": 1}})
    assert status == 400  # data values must be strings, as the real decoder insists
    status, body = _raw(
        api, "POST", "/api/v1/namespaces/default/configmaps", body={"metadata": {"name": "Bad_Name"}}
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
    status, body = _raw(api, "POST", "/api/v1/namespaces/nope/configmaps", body={"metadata": {"name": "x"}})
    assert status == 404 and body["message"] == 'namespaces "nope" not found'
    status, body = _raw(api, "POST", "/api/v1/namespaces/default/configmaps",
                        body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
    assert status == 400
    status, body = _raw(api, "POST", "/api/v1/namespaces/default/configmaps", body={"metadata": {}})
    assert status == 422


def test_strategic_patch_on_custom_resource_is_415(api):
    install_crd(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("test.example.com", "v1", "default", "widgets", widget("w"))
    status, body = _raw(api, "PATCH", "/apis/test.example.com/v1/namespaces/default/widgets/w",
                        body={"spec": {"size": 2}}, content_type="application/strategic-merge-patch+json")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    status, body = _raw(api, "PATCH", "/apis/test.example.com/v1/namespaces/default/widgets/w",
                        body=[{"op": "test", "path": "/spec/size", "value": 99}],
                        content_type="application/json-patch+json")
    assert status == 422  # a failed JSON patch test


def test_generation_and_status_subresource_rules(api):
    install_crd(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    args = ("test.example.com", "v1", "default", "widgets")
    created = custom.create_namespaced_custom_object(*args, dict(widget("w", 1), status={"phase": "ignored"}))
    assert created["metadata"]["generation"] == 1 and "status" not in created  # status dropped on create
    rv0 = int(created["metadata"]["resourceVersion"])
    # metadata-only change: new resourceVersion, same generation
    o = custom.patch_namespaced_custom_object(*args, "w", {"metadata": {"labels": {"x": "y"}}})
    assert o["metadata"]["generation"] == 1 and int(o["metadata"]["resourceVersion"]) > rv0
    # status through the main endpoint is ignored when the status subresource is enabled
    o = custom.patch_namespaced_custom_object(*args, "w", {"status": {"phase": "nope"}})
    assert "status" not in o
    # /status changes only status: no generation bump
    o = custom.patch_namespaced_custom_object_status(*args, "w", {"status": {"phase": "Ready"},
                                                                  "spec": {"size": 7}})
    assert o["status"] == {"phase": "Ready"} and o["spec"]["size"] == 1 and o["metadata"]["generation"] == 1
    # spec change bumps generation
    o = custom.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}})
    assert o["metadata"]["generation"] == 2 and o["status"] == {"phase": "Ready"}
    # a no-op write keeps the resourceVersion
    again = custom.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}})
    assert again["metadata"]["resourceVersion"] == o["metadata"]["resourceVersion"]
    # ConfigMaps keep no generation at all, even when their data changes (as kube-apiserver)
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "g"}, "data": {"a": "1"}})
    assert core.patch_namespaced_config_map("g", "default", {"data": {"a": "2"}}).metadata.generation is None


def test_generate_name_dry_run_selectors_and_secrets(api):
    core = kubernetes.client.CoreV1Api(api)
    a = core.create_namespaced_config_map(
        "default", {"metadata": {"generateName": "gen-", "labels": {"t": "a"}}}
    )
    assert a.metadata.name.startswith("gen-") and len(a.metadata.name) == len("gen-") + 5
    dry = core.create_namespaced_config_map("default", {"metadata": {"name": "dry"}}, dry_run="All")
    assert dry.metadata.name == "dry"
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("dry", "default")
    core.create_namespaced_config_map("default", {"metadata": {"name": "b", "labels": {"t": "b"}}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    names = lambda **kw: [i.metadata.name for i in core.list_namespaced_config_map("default", **kw).items]  # noqa
    assert names(label_selector="t") == sorted([a.metadata.name, "b"])
    assert names(label_selector="!t") == ["c", "kube-root-ca.crt"]  # the root-CA publisher's ConfigMap too
    assert names(label_selector="t!=a") == ["b", "c", "kube-root-ca.crt"]
    assert names(label_selector="t in (a,b)") == sorted([a.metadata.name, "b"])
    assert names(field_selector="metadata.name=c") == ["c"]
    all_ns = core.list_config_map_for_all_namespaces()
    assert {i.metadata.name for i in all_ns.items} >= {"b", "c"}
    s = core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"p": "hunter2"}})
    assert s.data == {"p": "aHVudGVyMg=="} and s.type == "Opaque"
    core.delete_collection_namespaced_config_map("default", label_selector="t")
    assert names() == ["c", "kube-root-ca.crt"]


def test_server_side_apply_create_then_merge(api):
    status, body = _raw(api, "PATCH", "/api/v1/namespaces/default/configmaps/ssa",
                        body=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                         "data": {"a": "1"}}),
                        content_type="application/apply-patch+yaml", query={"fieldManager": "me"})
    assert status == 201 and body["data"] == {"a": "1"}
    status, body = _raw(api, "PATCH", "/api/v1/namespaces/default/configmaps/ssa",
                        body="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {b: '2'}\n",
                        content_type="application/apply-patch+yaml", query={"fieldManager": "other"})
    assert status == 200 and body["data"] == {"a": "1", "b": "2"}  # two managers' fields merge
    status, body = _raw(api, "PATCH", "/api/v1/namespaces/default/configmaps/ssa",
                        body="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {c: '3'}\n",
                        content_type="application/apply-patch+yaml", query={"fieldManager": "me"})
    assert status == 200 and body["data"] == {"b": "2", "c": "3"}  # "me" no longer applies a: removed
    status, body = _raw(api, "PATCH", "/api/v1/namespaces/default/configmaps/ssa", body="data: {}",
                        content_type="application/apply-patch+yaml")
    assert status == 400  # fieldManager is required


def test_immutable_fields_of_builtins(api):
    apps = kubernetes.client.AppsV1Api(api)
    tmpl = {
        "metadata": {"labels": {"app": "a", "v": "1"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    apps.create_namespaced_deployment("default", {"metadata": {"name": "d"}, "spec": {
        "selector": {"matchLabels": {"app": "a"}}, "template": tmpl}})
    with pytest.raises(ApiException) as e:
        apps.patch_namespaced_deployment("d", "default", {"spec": {"selector": {"matchLabels": {"v": "1"}}}})
    assert (
        e.value.status == 422 and json.loads(e.value.body)["details"]["causes"][0]["field"] == "spec.selector"
    )
    batch = kubernetes.client.BatchV1Api(api)
    batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
    with pytest.raises(ApiException) as e:
        batch.patch_namespaced_job(
            "j", "default", {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}
        )
    assert e.value.status == 422
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_secret(
        "default", {"metadata": {"name": "s"}, "immutable": True, "data": {"a": "Yg=="}}
    )
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_secret("s", "default", {"data": {"a": "Yw=="}})
    assert e.value.status == 422
    core.patch_namespaced_secret(
        "s", "default", {"metadata": {"labels": {"ok": "yes"}}}
    )  # metadata still mutable


def test_partial_object_metadata_and_table(api):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "m", "labels": {"a": "b"}}, "data": {"k": "v"}}
    )
    url = api.configuration.host + "/api/v1/namespaces/default/configmaps"
    req = urllib.request.Request(url, headers={"Accept": "application/json;as=PartialObjectMetadataList;"
                                                         "g=meta.k8s.io;v=v1,application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["kind"] == "PartialObjectMetadataList"
    item = next(i for i in doc["items"] if i["metadata"]["name"] == "m")  # besides kube-root-ca.crt
    assert item["metadata"]["labels"] == {"a": "b"} and "data" not in item
    req = urllib.request.Request(url, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        table = json.loads(resp.read())
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert [r["cells"][:2] for r in table["rows"]] == [["kube-root-ca.crt", 1], ["m", 1]]


def test_list_paging_with_limit_and_continue(api):
    core = kubernetes.client.CoreV1Api(api)
    for i in range(7):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"p{i}"}})
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        seen += [i.metadata.name for i in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 8 - len(seen)
    # 8 with the root-CA publisher's kube-root-ca.crt, which every namespace has
    assert seen == ["kube-root-ca.crt"] + [f"p{i}" for i in range(7)] and pages == 3


def test_wrong_json_types_in_builtins_are_400(api):
    for path, body in [
        ("/api/v1/namespaces/default/services", {"metadata": {"name": "s"}, "spec": {"ports": 80}}),
        ("/apis/apps/v1/namespaces/default/deployments", {"metadata": {"name": "d"}, "spec": 5}),
        ("/apis/batch/v1/namespaces/default/cronjobs", {"metadata": {"name": "c"},
                                                        "spec": {"schedule": 5, "jobTemplate": {}}}),
        ("/api/v1/namespaces/default/persistentvolumeclaims", {"metadata": {"name": "p"}, "spec": "big"}),
    ]:
        status, doc = _raw(api, "POST", path, body=body)
        assert status == 400 and doc["reason"] == "BadRequest" and "cannot unmarshal" in doc["message"], doc
