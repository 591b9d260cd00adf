"""A watch gap that ends in 410 Gone and a relist (issue 11, defect 1), against the real operator.

The sandbox restarts on the same data directory with its watch history compacted, so the operator's
watch, resuming from its last resourceVersion, gets 410 Gone and kopf lists again. While the operator
could not see anything (a second sandbox on the same data, on another port), one CR was deleted and
re-created under the same name (same generation 1, new uid) and another was deleted. Before the fix the
re-created CR was never reconciled (its generation looked handled) and the deleted one stayed cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from ansible_operator.sandbox.testing import start_in_thread

from .conftest import EXECUTORS, HERE, NAMESPACE, Cluster, OperatorProcess, default_watch, wait_for


@pytest.fixture
def executor() -> str:
    return EXECUTORS[0]  # one executor is enough: this is about the intake


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    data_dir = tmp_path / "etcd"
    handle = start_in_thread(tmp_path / "kubeconfig", crds=[HERE / "crds"], data_dir=data_dir)
    api = handle.api_client()
    c = Cluster(handle.sandbox, handle.kubeconfig, api)
    c.core.create_namespace({"metadata": {"name": NAMESPACE}})
    wait_for(lambda: _served(c), 10, what="Widget CRD served")
    try:
        yield c
    finally:
        api.close()
        c.sandbox.stop_thread()


def _served(c: Cluster) -> bool:
    try:
        c.custom.list_namespaced_custom_object("test.ansible-operator.dev", "v1", NAMESPACE, "widgets")
        return True
    except Exception:
        return False


def _delete_for_good(c: Cluster, name: str) -> None:
    """Delete a widget although nobody runs its finalizer (someone removed it by hand)."""
    c.delete_widget(name)
    c.patch_widget(name, {"metadata": {"finalizers": None}})
    wait_for(lambda: c.get_widget(name) is None, 10, what=f"{name} gone")


def test_relist_after_410_runs_recreated_objects_and_forgets_deleted_ones(
        cluster: Cluster, start_operator: Any, tmp_path: Path) -> None:
    # Dependent watches off: the garbage collection of the old object's ConfigMap would re-queue the name
    # and hide the defect; only the intake's own decision counts here.
    op: OperatorProcess = start_operator([default_watch(watchDependentResources=False)])
    cluster.create_widget("again", {"color": "blue"})
    cluster.create_widget("gone", {"color": "blue"})
    cluster.wait_condition("again", "Successful", generation=1)
    cluster.wait_condition("gone", "Successful", generation=1)
    again = cluster.get_widget("again")
    assert again is not None
    old_uid = again["metadata"]["uid"]
    assert op.runs("gone")

    # The gap: the operator's API server goes away; meanwhile, on the same data, the changes happen.
    port, data_dir = cluster.sandbox.port, cluster.sandbox.data_dir
    cluster.sandbox.stop_thread()
    side = start_in_thread(tmp_path / "side.kubeconfig", crds=[HERE / "crds"], data_dir=data_dir)
    try:
        other = Cluster(side.sandbox, side.kubeconfig, side.api_client())
        _delete_for_good(other, "again")
        _delete_for_good(other, "gone")
        other.create_widget("again", {"color": "green"})
        recreated = other.get_widget("again")
        assert recreated is not None and recreated["metadata"]["generation"] == 1
        other.api.close()
    finally:
        side.sandbox.stop_thread()
    # Back on the operator's address; history restarts compacted, so the resumed watch gets 410 Gone.
    back = start_in_thread(tmp_path / "kubeconfig", crds=[HERE / "crds"], data_dir=data_dir, port=port)
    cluster.sandbox = back.sandbox

    done = cluster.wait_condition("again", "Successful", generation=1, timeout=90)
    assert done["ansibleResult"]["failures"] == 0
    again = cluster.get_widget("again")
    assert again is not None and again["metadata"]["uid"] != old_uid
    assert (cluster.configmap("again-out") or {}).get("color") == "green", op.logs()[-3000:]
    # the object deleted during the gap is forgotten, artifacts included
    wait_for(lambda: op.runs("gone") == [], 30, what="artifacts of 'gone' removed")
    logs = op.logs()
    assert "deleted during the watch gap" in logs, logs[-3000:]
    assert "someone else removed it" in logs  # the finalizer of both was removed by hand
    assert op.proc.poll() is None, logs[-3000:]
