"""Deletion semantics: finalizers, garbage collection (background/foreground/orphan), namespaces, CRDs."""

from __future__ import annotations

import json
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import CRD, install_crd, wait_for


@pytest.fixture
def api(sandbox: SandboxHandle):
    client = sandbox.api_client()
    yield client
    client.close()


@pytest.fixture
def core(api):
    return kubernetes.client.CoreV1Api(api)


def exists(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def owner_ref(obj) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": obj.metadata.name, "uid": obj.metadata.uid,
            "blockOwnerDeletion": True}


def test_finalizer_keeps_object_until_removed(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "f", "finalizers": ["example.com/x"]}})
    core.delete_namespaced_config_map("f", "default")
    obj = core.read_namespaced_config_map("f", "default")
    assert obj.metadata.deletion_timestamp is not None
    assert obj.metadata.deletion_grace_period_seconds == 0
    # no new finalizers once deletion started
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_config_map(
            "f", "default", {"metadata": {"finalizers": ["example.com/x", "other/y"]}}
        )
    assert e.value.status == 422
    core.patch_namespaced_config_map("f", "default", {"metadata": {"finalizers": None}})
    assert not exists(core.read_namespaced_config_map, "f", "default")


def test_background_gc_deletes_dependents(core):
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "dep", "ownerReferences": [owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("owner", "default")
    wait_for(lambda: not exists(core.read_namespaced_config_map, "dep", "default"))


def test_dependent_with_another_live_owner_survives(core):
    o1 = core.create_namespaced_config_map("default", {"metadata": {"name": "o1"}})
    o2 = core.create_namespaced_config_map("default", {"metadata": {"name": "o2"}})
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "dep", "ownerReferences": [owner_ref(o1), owner_ref(o2)]}}
    )
    core.delete_namespaced_config_map("o1", "default")
    dep = wait_for(
        lambda: (
            len((d := core.read_namespaced_config_map("dep", "default")).metadata.owner_references) == 1 and d
        )
    )
    assert dep.metadata.owner_references[0].name == "o2"


def test_foreground_deletes_dependents_first(core):
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        "default",
        {
            "metadata": {
                "name": "dep",
                "finalizers": ["example.com/hold"],
                "ownerReferences": [owner_ref(owner)],
            }
        },
    )
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    # the owner waits (foregroundDeletion finalizer) while its dependent is still there
    wait_for(lambda: core.read_namespaced_config_map("dep", "default").metadata.deletion_timestamp)
    o = core.read_namespaced_config_map("owner", "default")
    assert "foregroundDeletion" in o.metadata.finalizers and o.metadata.deletion_timestamp
    core.patch_namespaced_config_map("dep", "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: not exists(core.read_namespaced_config_map, "owner", "default"))


def test_orphan_keeps_dependents_without_owner_reference(core):
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "dep", "ownerReferences": [owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Orphan")
    assert not exists(core.read_namespaced_config_map, "owner", "default")
    time.sleep(0.2)
    dep = core.read_namespaced_config_map("dep", "default")
    assert not dep.metadata.owner_references


def test_namespace_deletion(core):
    core.create_namespace({"metadata": {"name": "scratch"}})
    core.create_namespaced_config_map("scratch", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map(
        "scratch", {"metadata": {"name": "held", "finalizers": ["example.com/h"]}}
    )
    core.delete_namespace("scratch")
    ns = core.read_namespace("scratch")
    assert ns.status.phase == "Terminating"
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("scratch", {"metadata": {"name": "new"}})
    assert e.value.status == 403 and json.loads(e.value.body)["reason"] == "Forbidden"
    wait_for(lambda: not exists(core.read_namespaced_config_map, "a", "scratch"))
    assert exists(core.read_namespace, "scratch")  # still held by the finalizer of 'held'
    core.patch_namespaced_config_map("held", "scratch", {"metadata": {"finalizers": None}})
    wait_for(lambda: not exists(core.read_namespace, "scratch"))
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map("scratch", {"metadata": {"name": "new"}})
    assert e.value.status == 404 and json.loads(e.value.body)["message"] == 'namespaces "scratch" not found'


def test_crd_deletion_removes_resources_and_discovery(api):
    install_crd(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("test.example.com", "v1", "default", "widgets",
                                           {"apiVersion": "test.example.com/v1", "kind": "Widget",
                                            "metadata": {"name": "w"}, "spec": {"size": 1}})
    ext = kubernetes.client.ApiextensionsV1Api(api)
    ext.delete_custom_resource_definition(CRD["metadata"]["name"])
    wait_for(lambda: not exists(ext.read_custom_resource_definition, CRD["metadata"]["name"]))
    groups = kubernetes.client.ApisApi(api).get_api_versions()
    assert "test.example.com" not in [g.name for g in groups.groups]
    with pytest.raises(ApiException) as e:
        custom.list_namespaced_custom_object("test.example.com", "v1", "default", "widgets")
    assert e.value.status == 404


def test_object_with_only_missing_owners_is_collected(core):
    core.create_namespaced_config_map(
        "default",
        {
            "metadata": {
                "name": "orphaned",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "ghost",
                        "uid": "00000000-0000-0000-0000-000000000000",
                    }
                ],
            }
        },
    )
    wait_for(lambda: not exists(core.read_namespaced_config_map, "orphaned", "default"))
