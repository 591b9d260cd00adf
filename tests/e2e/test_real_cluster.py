"""What only a real control plane shows: kube-controller-manager's garbage collector deleting (or orphaning)
what a Widget owns under each deletion propagation policy, and its namespace controller deleting a namespace
while a Widget in it waits for its finalizer role.

The widget role writes ``<name>-out``, a ConfigMap the per-run proxy gives an ownerReference to the Widget
(as Operator SDK's: neither ``controller`` nor ``blockOwnerDeletion``); the finalizer role writes
``<ns>-<name>-tombstone`` in ``default``, outside the namespace being deleted.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests import kube

from .conftest import GROUP, PLURAL, VERSION, Cluster, OperatorProcess, one_executor, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not kube.real(), reason="garbage collection and namespace deletion are "
                       "kube-controller-manager's: they need the real control plane "
                       "(ANSIBLE_OPERATOR_TEST_API=real)"),
    # about the API server's side of deletion, not how Ansible runs: one executor
    one_executor,
]

FINALIZER = f"{GROUP}/finalizer"
HOLD = "test.ansible-operator.dev/hold"  # a finalizer of the test's: keeps a dependent from going


def _delete(cluster: Cluster, name: str, policy: str) -> None:
    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.ns, PLURAL, name,
                                                   propagation_policy=policy)


def _reconciled(cluster: Cluster, name: str) -> dict[str, Any]:
    """Create a Widget and wait for its run; returns it (with the operator's finalizer)."""
    cluster.create_widget(name, {"color": "gc"})
    cluster.wait_condition(name, "Successful", timeout=120)
    widget = cluster.get_widget(name)
    assert widget is not None and FINALIZER in widget["metadata"]["finalizers"]
    out = cluster.core.read_namespaced_config_map(f"{name}-out", cluster.ns)
    assert [(r.kind, r.uid, r.block_owner_deletion) for r in out.metadata.owner_references or []] == [
        ("Widget", widget["metadata"]["uid"], None)]
    return widget


def _tombstone(cluster: Cluster, name: str, ns: str | None = None) -> dict[str, str] | None:
    return cluster.configmap(f"{ns or cluster.ns}-{name}-tombstone", namespace="default")


def _finalizer_runs(op: OperatorProcess, ns: str, name: str) -> int:
    return sum(1 for line in op.logs().splitlines() if f"[Widget {ns}/{name}] finalize run " in line
               and " started " in line)


def test_background_deletion_runs_the_finalizer_then_collects_dependents(cluster: Cluster,
                                                                          start_operator: Any) -> None:
    op = start_operator()
    _reconciled(cluster, "bg")
    _delete(cluster, "bg", "Background")
    wait_for(lambda: cluster.get_widget("bg") is None, 120, what="bg released by its finalizer")
    assert _tombstone(cluster, "bg") == {"deleted": "true"}
    wait_for(lambda: cluster.configmap("bg-out") is None, 60, what="bg-out garbage-collected")
    assert _finalizer_runs(op, cluster.ns, "bg") == 1, op.logs()[-3000:]


def test_foreground_deletion_keeps_the_cr_until_blocking_dependents_are_gone(cluster: Cluster,
                                                                            start_operator: Any) -> None:
    op = start_operator()
    widget = _reconciled(cluster, "fg")
    # A dependent that blocks its owner's deletion and is slow to go (a finalizer of the test's, as a
    # terminating Pod would be): with foreground deletion the Widget must wait for it.
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "name": "fg",
           "uid": widget["metadata"]["uid"], "blockOwnerDeletion": True}
    cluster.core.create_namespaced_config_map(cluster.ns, {"metadata": {
        "name": "fg-held", "ownerReferences": [ref], "finalizers": [HOLD]}})
    _delete(cluster, "fg", "Foreground")

    def waiting_for_dependents() -> dict[str, Any] | None:
        obj = cluster.get_widget("fg")
        assert obj is not None, "the Widget went before its blocking dependent"
        return obj if obj["metadata"].get("finalizers") == ["foregroundDeletion"] else None

    # the operator ran its finalizer and removed only its own finalizer, not the garbage collector's
    held = wait_for(waiting_for_dependents, 120, what="only foregroundDeletion left on fg")
    assert held["metadata"]["deletionTimestamp"]
    assert _tombstone(cluster, "fg") == {"deleted": "true"}
    # every dependent was asked to go: the proxy-owned one (not blocking) is gone, the held one is deleting
    # the garbage collector's queue is shared with every test's namespace deletions: minutes on a busy machine
    try:
        wait_for(lambda: cluster.configmap("fg-out") is None, 240, what="fg-out deleted in the foreground")
    except AssertionError:
        out = cluster.core.read_namespaced_config_map("fg-out", cluster.ns).metadata
        raise AssertionError(
            f"fg-out not deleted: created {out.creation_timestamp}, uid {out.uid}, deleting "
            f"{out.deletion_timestamp}, owners {out.owner_references}\n{op.logs()[-3000:]}") from None
    wait_for(lambda: cluster.core.read_namespaced_config_map("fg-held", cluster.ns).metadata
             .deletion_timestamp, 60, what="fg-held being deleted")
    assert cluster.get_widget("fg") is not None

    cluster.core.patch_namespaced_config_map("fg-held", cluster.ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: cluster.get_widget("fg") is None, 60, what="fg gone once its dependents are")
    assert _finalizer_runs(op, cluster.ns, "fg") == 1, op.logs()[-3000:]


def test_orphan_deletion_keeps_dependents_without_their_owner(cluster: Cluster, start_operator: Any) -> None:
    op = start_operator()
    _reconciled(cluster, "orphaner")
    _delete(cluster, "orphaner", "Orphan")
    wait_for(lambda: cluster.get_widget("orphaner") is None, 120, what="orphaner released")
    assert _tombstone(cluster, "orphaner") == {"deleted": "true"}
    # the garbage collector removed the ownerReference before it let the owner go
    out = cluster.core.read_namespaced_config_map("orphaner-out", cluster.ns)
    assert not out.metadata.owner_references and out.metadata.deletion_timestamp is None
    assert out.data["color"] == "gc"
    assert _finalizer_runs(op, cluster.ns, "orphaner") == 1, op.logs()[-3000:]
    assert op.proc.poll() is None


def _namespace_gone(cluster: Cluster, ns: str) -> bool:
    try:
        cluster.core.read_namespace(ns)
        return False
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise


def test_namespace_deletion_waits_for_the_finalizer_role(cluster: Cluster, start_operator: Any) -> None:
    op = start_operator()
    ns = cluster.ns
    _reconciled(cluster, "tenant")
    cluster.core.delete_namespace(ns)

    # the namespace controller deletes the Widget; the operator runs the finalizer role and removes its
    # finalizer; only then can the namespace (and the garbage-collected ConfigMap) go
    wait_for(lambda: _namespace_gone(cluster, ns), 180, interval=0.5, what=f"namespace {ns} deleted")
    assert _tombstone(cluster, "tenant", ns) == {"deleted": "true"}
    assert _finalizer_runs(op, ns, "tenant") == 1, op.logs()[-3000:]
    assert op.proc.poll() is None, op.logs()[-3000:]
    logs = op.logs()
    assert "Traceback" not in logs
    # the finalizer run's Event is refused (nothing can be created in a terminating namespace): that is not
    # a missing permission, and must not use up the one warning about one
    assert "resources: [events], verbs: [create, patch]" not in logs, logs[-3000:]


def test_namespace_deletion_with_a_failing_finalizer_waits(cluster: Cluster, start_operator: Any) -> None:
    """While the finalizer role fails, the Widget keeps its finalizer and the namespace stays Terminating
    (saying which finalizer it waits for); once the role succeeds, both go."""
    start_operator()
    ns = cluster.ns
    _reconciled(cluster, "stuck")
    cluster.patch_widget("stuck", {"spec": {"finalizerFail": True}})
    cluster.wait_condition("stuck", "Successful", generation=2, timeout=120)
    cluster.core.delete_namespace(ns)

    def finalizer_failed() -> dict[str, Any] | None:
        # (a reconcile may fail first: the namespace controller deletes stuck-out before it deletes the
        # Widget, the dependent watch re-queues it, and its role cannot create in a terminating namespace)
        failure = cluster.condition("stuck", "Failure") or {}
        return failure if "finalizer asked to fail" in failure.get("message", "") else None

    wait_for(finalizer_failed, 120, what="the finalizer's Failure")

    def terminating_because_of_it() -> str | None:
        conditions = cluster.core.read_namespace(ns).status.conditions or []
        remaining = [c for c in conditions if c.type == "NamespaceFinalizersRemaining" and c.status == "True"]
        return remaining[0].message if remaining and FINALIZER in remaining[0].message else None

    wait_for(terminating_because_of_it, 120, interval=0.5, what=f"{ns} waiting for {FINALIZER}")
    assert cluster.core.read_namespace(ns).status.phase == "Terminating"
    assert _tombstone(cluster, "stuck", ns) is None

    # the finalizer is fixed (the spec of an object being deleted can still change)
    cluster.patch_widget("stuck", {"spec": {"finalizerFail": False}})

    wait_for(lambda: _namespace_gone(cluster, ns), 180, interval=0.5, what=f"namespace {ns} deleted")
    assert _tombstone(cluster, "stuck", ns) == {"deleted": "true"}

