"""Issue 10 item 4, end to end: a role that updates a user's pre-existing object never makes it the CR's.

The finalizer role force-updates (PUT), server-side applies and patches ConfigMaps a user created before
the CR existed. Under the old "inject on PUT/apply" rule the first one got an ownerReference to the CR being
deleted, and garbage collection then deleted the user's ConfigMap. Owners are added on create only (as in
Operator SDK's proxy), so all three survive the CR, while the ConfigMap the role did create is
garbage-collected with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import GROUP, KIND, VERSION, Cluster, one_executor, wait_for

# The owner proxy's rule (ours) as kubernetes.core's modules meet it: both executors' modules reach the API
# server through the proxy the same way, and its kubernetes.core modules run on both ansible-core ends in
# test_runner_core and tests/examples (tests/conftest.py VERSION_INDEPENDENT)
pytestmark = [pytest.mark.e2e, one_executor]

USER_OBJECTS = ("user-settings", "user-applied", "user-patched")


def _cm(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "{{ ansible_operator_meta.namespace }}"}, "data": data}


def _write_roles(base: Path) -> tuple[Path, Path]:
    role, finalizer = base / "roles" / "app", base / "roles" / "app_finalizer"
    for path, tasks in (
        (role, [{"name": "Create the CR's own ConfigMap",
                 "kubernetes.core.k8s": {"definition": _cm("{{ ansible_operator_meta.name }}-owned",
                                                           {"created": "by-the-role"})}}]),
        (finalizer, [
            {"name": "Force-update (PUT) the user's settings",
             "kubernetes.core.k8s": {"force": True, "definition": _cm("user-settings", {"cleanup": "done"})}},
            {"name": "Server-side apply to the user's ConfigMap",
             "kubernetes.core.k8s": {"apply": True, "server_side_apply": {"field_manager": "app-finalizer",
                                                                          "force_conflicts": True},
                                     "definition": _cm("user-applied", {"cleanup": "done"})}},
            {"name": "Patch the user's other ConfigMap",
             "kubernetes.core.k8s": {"definition": _cm("user-patched", {"cleanup": "done"})}},
        ]),
    ):
        (path / "tasks").mkdir(parents=True)
        (path / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    return role, finalizer


def test_finalizer_updating_users_configmaps_does_not_get_them_deleted(
        cluster: Cluster, start_operator, tmp_path: Path) -> None:
    for name in USER_OBJECTS:
        cluster.core.create_namespaced_config_map(cluster.ns, {"metadata": {"name": name},
                                                              "data": {"owner": "the-user"}})
    role, finalizer = _write_roles(tmp_path)
    op = start_operator([{"group": GROUP, "version": VERSION, "kind": KIND, "role": str(role),
                          "finalizer": {"name": f"{GROUP}/finalizer", "role": str(finalizer)}}])
    created = cluster.create_widget("adopter", {})
    cluster.wait_condition("adopter", "Successful", timeout=120)
    owned = cluster.core.read_namespaced_config_map("adopter-owned", cluster.ns)
    assert [r.uid for r in owned.metadata.owner_references] == [created["metadata"]["uid"]]

    cluster.delete_widget("adopter")
    wait_for(lambda: cluster.get_widget("adopter") is None, 120, what="adopter released by its finalizer")
    wait_for(
        lambda: cluster.configmap("adopter-owned") is None, 60, what="the role's own ConfigMap collected"
    )
    for name in USER_OBJECTS:
        obj = cluster.core.read_namespaced_config_map(name, cluster.ns)  # 404: the data loss of issue 10
        # PUT replaces the data; apply and patch merge into it
        expected = (
            {"cleanup": "done"} if name == "user-settings" else {"owner": "the-user", "cleanup": "done"}
        )
        assert obj.data == expected, (name, obj.data)
        assert not obj.metadata.owner_references, (name, obj.metadata.owner_references, op.logs()[-3000:])
