"""The kubernetes Python client (typed APIs and DynamicClient) against the sandbox: CRUD and errors."""

from __future__ import annotations

import json

import kubernetes
import pytest
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from ansible_operator.sandbox.testing import SandboxHandle

from .helpers import install_crd, wait_for

@pytest.fixture
def api(sandbox: SandboxHandle) -> kubernetes.client.ApiClient:
    client = sandbox.api_client()
    yield client
    client.close()


def test_configmap_crud(api):
    core = kubernetes.client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm1", "labels": {"a": "1"}},
                                                       "data": {"k": "v"}})
    assert cm.metadata.uid and cm.metadata.resource_version and cm.metadata.generation == 1
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
    dep = wait_for(lambda: (d := apps.read_namespaced_deployment("web", "default")).status.available_replicas == 2
                   and d)
    assert dep.status.observed_generation == dep.metadata.generation
    assert any(c.type == "Available" and c.status == "True" for c in dep.status.conditions)


def test_dynamic_client_custom_resource(api):
    install_crd(api)
    dyn = DynamicClient(api)
    widgets = dyn.resources.get(api_version="test.example.com/v1", kind="Widget")
    obj = widgets.create(body={"apiVersion": "test.example.com/v1", "kind": "Widget",
                               "metadata": {"name": "w1"}, "spec": {"size": 2, "unknown": 1}}, namespace="default")
    assert obj.spec.color == "blue"  # defaulted
    assert "unknown" not in obj.spec  # pruned
    with pytest.raises(kubernetes.dynamic.exceptions.UnprocessibleEntityError) as e:
        widgets.create(body={"apiVersion": "test.example.com/v1", "kind": "Widget",
                             "metadata": {"name": "w2"}, "spec": {"size": 0}}, namespace="default")
    status = json.loads(e.value.body)
    assert status["reason"] == "Invalid" and status["details"]["causes"][0]["field"] == "spec.size"
    listed = widgets.get(namespace="default")
    assert [i.metadata.name for i in listed.items] == ["w1"]
