"""Field ownership: metadata.managedFields on every write, server-side apply conflicts, force, dropped
fields."""

from __future__ import annotations

import json
import re
import subprocess

import kubernetes
import pytest

from ansible_operator_sandbox.testing import SandboxHandle, call_api

CM = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def api(sandbox: SandboxHandle):
    client = sandbox.api_client()
    yield client
    client.close()


def _apply(api, path: str, body: dict, manager: str, force: bool = False):
    query = [("fieldManager", manager)] + ([("force", "true")] if force else [])
    return call_api(api, "PATCH", path, body, content_type="application/apply-patch+yaml", query=query)


def _cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _entries(obj) -> dict[tuple[str, str], dict]:
    meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
    fields = meta["managedFields"] if isinstance(meta, dict) else [
        kubernetes.client.ApiClient().sanitize_for_serialization(e) for e in meta.managed_fields]
    return {(e["manager"], e["operation"]): e for e in fields}


def test_every_write_records_its_manager(api):
    core = kubernetes.client.CoreV1Api(api)
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "w", "labels": {"a": "b"}},
                                                       "data": {"k": "v"}})
    (manager, op), = _entries(cm)
    assert (manager, op) == ("OpenAPI-Generator", "Update")  # the User-Agent prefix, as kube-apiserver
    entry = _entries(cm)[(manager, op)]
    assert entry["apiVersion"] == "v1" and entry["fieldsType"] == "FieldsV1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|\+00:00)", entry["time"])  # typed: parsed
    assert entry["fieldsV1"] == {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
    cm = core.patch_namespaced_config_map("w", "default", {"data": {"k2": "v2"}}, field_manager="patcher")
    entries = _entries(cm)
    assert entries[("patcher", "Update")]["fieldsV1"] == {"f:data": {"f:k2": {}}}
    # an update that changes nothing records nothing and keeps the resourceVersion
    again = core.patch_namespaced_config_map("w", "default", {"data": {"k2": "v2"}}, field_manager="third")
    assert again.metadata.resource_version == cm.metadata.resource_version
    assert ("third", "Update") not in _entries(again)
    # taking over a field moves it
    cm = core.patch_namespaced_config_map("w", "default", {"data": {"k": "new"}}, field_manager="patcher")
    assert _entries(cm)[("patcher", "Update")]["fieldsV1"] == {"f:data": {"f:k": {}, "f:k2": {}}}
    assert _entries(cm)[("OpenAPI-Generator", "Update")]["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:a": {}}}
    }


def test_apply_conflicts_force_and_shared_ownership(api):
    created = _apply(api, f"{CM}/c", _cm("c", x="1", y="1"), "alice")
    assert _entries(created)[("alice", "Apply")]["fieldsV1"] == {"f:data": {"f:x": {}, "f:y": {}}}
    with pytest.raises(kubernetes.client.ApiException) as e:
        _apply(api, f"{CM}/c", _cm("c", x="2"), "bob")
    assert e.value.status == 409
    status = json.loads(e.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.x'
    assert status["details"] == {
        "causes": [{"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.x"}]
    }
    # the same value is no conflict: both own it, and the new manager is recorded although nothing changed
    same = _apply(api, f"{CM}/c", _cm("c", y="1"), "carol")
    assert int(same["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert _entries(same)[("carol", "Apply")]["fieldsV1"] == {"f:data": {"f:y": {}}}
    forced = _apply(api, f"{CM}/c", _cm("c", x="2"), "bob", force=True)
    assert forced["data"] == {"x": "2", "y": "1"}
    assert _entries(forced)[("bob", "Apply")]["fieldsV1"] == {"f:data": {"f:x": {}}}
    assert _entries(forced)[("alice", "Apply")]["fieldsV1"] == {"f:data": {"f:y": {}}}
    # alice stops applying y: carol still owns it, so it stays; then carol drops it too and it goes
    kept = _apply(api, f"{CM}/c", _cm("c", z="1"), "alice")
    assert kept["data"] == {"x": "2", "y": "1", "z": "1"}
    dropped = _apply(
        api, f"{CM}/c", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, "carol"
    )
    assert dropped["data"] == {"x": "2", "z": "1"}
    assert ("carol", "Apply") not in _entries(dropped)  # owns nothing any more


def test_conflict_with_an_update_manager_names_version_and_time(api):
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespaced_config_map("default", _cm("u", x="1"), field_manager="editor")
    with pytest.raises(kubernetes.client.ApiException) as e:
        _apply(api, f"{CM}/u", _cm("u", x="2"), "applier")
    message = json.loads(e.value.body)["message"]
    assert re.fullmatch(r'Apply failed with 1 conflict: conflict with "editor" using v1 at '
                        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: \.data\.x", message), message
    with pytest.raises(kubernetes.client.ApiException) as e:
        _apply(api, f"{CM}/u", dict(_cm("u", x="2"), metadata={"name": "u", "labels": {"l": "1"}}), "applier")
    assert json.loads(e.value.body)["message"].startswith("Apply failed with 1 conflict")
    core.patch_namespaced_config_map("u", "default", {"data": {"y": "1", "z": "1"}}, field_manager="editor")
    with pytest.raises(kubernetes.client.ApiException) as e:
        _apply(api, f"{CM}/u", _cm("u", x="2", y="2", z="2"), "applier")
    message = json.loads(e.value.body)["message"]
    assert message.startswith('Apply failed with 3 conflicts: conflicts with "editor" using v1 at ')
    assert message.endswith(":\n- .data.x\n- .data.y\n- .data.z")


def test_associative_lists_and_status_subresource(api):
    apps = kubernetes.client.AppsV1Api(api)
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}]}]},
            },
        },
    }
    obj = _apply(api, "/apis/apps/v1/namespaces/default/deployments/d", deploy, "roles")
    containers = _entries(obj)[("roles", "Apply")]["fieldsV1"]["f:spec"]["f:template"]["f:spec"][
        "f:containers"
    ]
    item = containers['k:{"name":"c"}']
    assert item["."] == {} and item["f:image"] == {} and item["f:name"] == {}
    assert 'k:{"containerPort":80}' in item["f:ports"]
    with pytest.raises(kubernetes.client.ApiException) as e:
        changed = json.loads(json.dumps(deploy))
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
        _apply(api, "/apis/apps/v1/namespaces/default/deployments/d", changed, "other")
    assert json.loads(e.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "roles": .spec.template.spec.containers[name="c"].image')
    # the simulated controller writes status through /status: its entry says so
    from ansible_operator_sandbox.testing import wait_for
    d = wait_for(lambda: (d := apps.read_namespaced_deployment("d", "default")).status.ready_replicas and d)
    status_entries = [e for e in d.metadata.managed_fields if e.subresource == "status"]
    assert status_entries and status_entries[0].manager == "kube-controller-manager"
    assert "f:status" in status_entries[0].fields_v1


def test_kubectl_server_side_apply_conflict(sandbox):
    env = sandbox.kubectl_env()
    manifest = json.dumps(_cm("k", key="one"))
    first = subprocess.run(["kubectl", "apply", "--server-side", "-f", "-"], input=manifest, env=env,
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    changed = json.dumps(_cm("k", key="two"))
    clash = subprocess.run(
        ["kubectl", "apply", "--server-side", "--field-manager", "someone-else", "-f", "-"],
        input=changed,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert clash.returncode != 0
    assert 'conflict with "kubectl"' in clash.stderr and ".data.key" in clash.stderr
    forced = subprocess.run(
        [
            "kubectl",
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "someone-else",
            "-f",
            "-",
        ],
        input=changed,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert forced.returncode == 0, forced.stderr


def test_kubectl_migrates_client_side_apply_ownership(sandbox):
    """kubectl apply --server-side after a client-side apply: a changed value conflicts with
    "kubectl-client-side-apply"; with the same values it succeeds and kubectl rewrites managedFields (a JSON
    patch
    of metadata.managedFields, which the server honours), after which kubectl owns the fields."""
    env = sandbox.kubectl_env()

    def apply(value: str, *flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", "apply", *flags, "-f", "-"], input=json.dumps(_cm("mig", a=value)),
                              env=env, capture_output=True, text=True, timeout=60)
    assert apply("1").returncode == 0
    clash = apply("2", "--server-side")
    assert clash.returncode != 0 and 'conflict with "kubectl-client-side-apply" using v1' in clash.stderr
    assert apply("1", "--server-side").returncode == 0
    managers = subprocess.run(
        ["kubectl", "get", "cm", "mig", "-o", "jsonpath={.metadata.managedFields[*].manager}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert "kubectl-client-side-apply" not in managers and "kubectl" in managers
    assert apply("3", "--server-side").returncode == 0


def test_apply_that_creates_owns_only_what_it_applied(api):
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}}}
    created = _apply(api, "/api/v1/namespaces/default/services/svc", body, "roles")
    fields = _entries(created)[("roles", "Apply")]["fieldsV1"]
    assert set(fields["f:spec"]) == {"f:ports", "f:selector"}  # not f:type, f:clusterIP, f:sessionAffinity...
    assert created["spec"]["type"] == "ClusterIP"  # defaulted, owned by nobody
