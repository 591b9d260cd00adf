"""A watch gap that ends in 410 Gone and a relist (issue 11, defect 1), against the real operator.

While the operator cannot see anything, one CR is deleted and re-created under the same name (same
generation 1, new uid) and another is deleted; then the watch history is compacted, so the operator's watch,
resuming from its last resourceVersion, gets 410 Gone and kopf lists again. Before the fix the re-created CR
was never reconciled (its generation looked handled) and the deleted one stayed cached.

* Real control plane (a private one: compaction must not disturb the other tests): kube-apiserver without
  its watch cache (``--watch-cache=false``: watches are served by etcd, so a compaction really answers an
  old resourceVersion with 410), the operator behind a TLS proxy that is cut for the gap; the changes go to
  the API server directly, then etcd is compacted and the proxy restored. The proxy sees the 410 and the
  relist.
* Sandbox: it restarts on the same data directory with its watch history compacted; the changes are made
  by a second sandbox on the same data, on another port, while the operator's is down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from ansible_operator.controlplane import ControlPlane
from ansible_operator_sandbox.testing import start_in_thread
from tests import kube

from .conftest import HERE, NAMESPACE, Cluster, OperatorProcess, default_watch, one_executor, wait_for
from .proxy import TLSCutProxy

# over ~20 s each: started first (tests/conftest.py); one executor is enough: this is about the intake
pytestmark = [pytest.mark.slow, one_executor]

GROUP_PATH = "/apis/test.ansible-operator.dev/v1/"  # the widgets' collections, in the proxy's counts


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane | None]:
    if not kube.real():
        yield None
        return
    # kube-controller-manager for the garbage collector (the deleted CRs' ConfigMaps); no pods here
    plane = kube.private_control_plane(tmp_path / "cp", crds=(HERE / "crds",),
                                       apiserver_args=["--watch-cache=false"],
                                       components=["etcd", "kube-apiserver", "kube-controller-manager"])
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def proxy(plane: ControlPlane | None) -> Iterator[TLSCutProxy | None]:
    if plane is None:
        yield None
        return
    p = TLSCutProxy(plane.url, plane.directory / "pki").start()
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def cluster(tmp_path: Path, plane: ControlPlane | None) -> Iterator[Cluster]:
    if plane is not None:
        api = kube.api_client_for(plane.kubeconfig)
        c = Cluster(None, plane.kubeconfig, api)
        c.core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for(lambda: c.served(NAMESPACE), 30, what="Widget CRD served")
        _wait_for_the_collector(c)
        try:
            yield c
        finally:
            api.close()
        return
    data_dir = tmp_path / "etcd"
    handle = start_in_thread(tmp_path / "kubeconfig", crds=[HERE / "crds"], data_dir=data_dir)
    api = handle.api_client()
    c = Cluster(handle.sandbox, handle.kubeconfig, api)
    c.core.create_namespace({"metadata": {"name": NAMESPACE}})
    wait_for(lambda: c.served(NAMESPACE), 10, what="Widget CRD served")
    try:
        yield c
    finally:
        api.close()
        if c.sandbox is not None:
            c.sandbox.stop_thread()


def _wait_for_the_collector(c: Cluster) -> None:
    """The CRD was installed after kube-controller-manager started, so its garbage collector learns the
    Widget kind at its next discovery sync (every 30 s) and until then collects nothing a Widget owns (CI
    at 40b2ae7: a test waited 30 s for it, in vain). A canary proves it knows Widgets: a ConfigMap owned
    by a Widget that is then deleted goes."""
    owner = c.create_widget("gc-canary", {"color": "none"})
    c.core.create_namespaced_config_map(c.ns, {"metadata": {"name": "gc-canary", "ownerReferences": [{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": "gc-canary",
        "uid": owner["metadata"]["uid"]}]}})
    c.delete_widget("gc-canary")
    wait_for(lambda: c.configmap("gc-canary") is None, 180,
             what="kube-controller-manager's garbage collector collecting what a Widget owns")


def _delete_for_good(c: Cluster, name: str) -> None:
    """Delete a widget although nobody runs its finalizer (someone removed it by hand)."""
    c.delete_widget(name)
    c.patch_widget(name, {"metadata": {"finalizers": None}})
    wait_for(lambda: c.get_widget(name) is None, 10, what=f"{name} gone")


def _both_reconciled(c: Cluster) -> dict[str, str]:
    """'again' and 'gone' created and reconciled once: their uids."""
    for name in ("again", "gone"):
        c.create_widget(name, {"color": "blue"})
    uids = {}
    for name in ("again", "gone"):
        c.wait_condition(name, "Successful", generation=1)
        uids[name] = (c.get_widget(name) or {})["metadata"]["uid"]
    return uids


def _changes(c: Cluster) -> None:
    """What happens while the operator cannot see: 'again' and 'gone' deleted, 'again' re-created."""
    _delete_for_good(c, "again")
    _delete_for_good(c, "gone")
    c.create_widget("again", {"color": "green"})
    recreated = c.get_widget("again")
    assert recreated is not None and recreated["metadata"]["generation"] == 1


def test_relist_after_410_runs_recreated_objects_and_forgets_deleted_ones(
        cluster: Cluster, plane: ControlPlane | None, proxy: TLSCutProxy | None, start_operator: Any,
        tmp_path: Path) -> None:
    # Dependent watches off: the garbage collection of the old object's ConfigMap would re-queue the name
    # and hide the defect; only the intake's own decision counts here.
    kubeconfig = None
    if proxy is not None:
        kubeconfig = proxy.write_kubeconfig(cluster.kubeconfig, tmp_path / "via-proxy.kubeconfig")
    op: OperatorProcess = start_operator([default_watch(watchDependentResources=False)],
                                         kubeconfig=kubeconfig)
    uids = _both_reconciled(cluster)
    old_uid = uids["again"]
    assert op.runs("gone")

    if plane is not None and proxy is not None:
        lists_before, expired_before = proxy.relists(GROUP_PATH), proxy.expired
        proxy.cut()
        # The old objects' ConfigMaps go with them (the garbage collector): wait, so that the re-created
        # object's run makes its own instead of updating one the collector is about to delete.
        _delete_for_good(cluster, "again")
        _delete_for_good(cluster, "gone")
        wait_for(lambda: cluster.configmap("again-out") is None and cluster.configmap("gone-out") is None,
                 60, what="the deleted widgets' ConfigMaps garbage-collected")
        cluster.create_widget("again", {"color": "green"})
        recreated = cluster.get_widget("again")
        assert recreated is not None and recreated["metadata"]["generation"] == 1
        compacted = plane.compact()
        assert compacted >= int(recreated["metadata"]["resourceVersion"])
        proxy.restore()
    else:
        # The gap: the operator's API server goes away; meanwhile, on the same data, the changes happen.
        assert cluster.sandbox is not None
        port, data_dir = cluster.sandbox.port, cluster.sandbox.data_dir
        cluster.sandbox.stop_thread()
        side = start_in_thread(tmp_path / "side.kubeconfig", crds=[HERE / "crds"], data_dir=data_dir)
        try:
            other = Cluster(side.sandbox, side.kubeconfig, side.api_client())
            _changes(other)
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
    if proxy is not None:
        # the resumed watch really got 410 Gone from the API server, and the operator listed again
        assert proxy.expired > expired_before, "the watch gap did not end in 410 Gone"
        assert proxy.relists(GROUP_PATH) > lists_before, "the operator did not list the widgets again"


def test_no_run_for_an_object_deleted_during_the_gap_even_when_its_dependents_requeue_it(
        cluster: Cluster, plane: ControlPlane | None, proxy: TLSCutProxy | None, start_operator: Any,
        tmp_path: Path) -> None:
    """Issue 20, defect 3: with dependent watches on, the relist of the owned ConfigMaps after a 410
    re-queues their owners (deleted during the gap) before the owners' own relist has evicted them from
    the cache. The proxy holds the widgets' relist back until the owners were re-queued and handled, so
    that order is certain. No role may run for a uid that is gone (each run reads its object from the
    API first). Real compaction only."""
    if plane is None or proxy is None:
        pytest.skip("needs a real control plane: etcd compaction and a cut connection")
    kubeconfig = proxy.write_kubeconfig(cluster.kubeconfig, tmp_path / "via-proxy.kubeconfig")
    op: OperatorProcess = start_operator([default_watch()], "--zap-log-level=debug", kubeconfig=kubeconfig)
    dead = set(_both_reconciled(cluster).values())
    assert cluster.configmap("again-out") and cluster.configmap("gone-out")

    proxy.cut()
    logged_before = len(op.logs())
    _delete_for_good(cluster, "again")
    _delete_for_good(cluster, "gone")
    # the collector takes the old ConfigMaps: the dependents' relist then re-queues their owners
    wait_for(lambda: cluster.configmap("again-out") is None and cluster.configmap("gone-out") is None,
             60, what="the deleted widgets' ConfigMaps garbage-collected")
    cluster.create_widget("again", {"color": "green"})
    recreated = cluster.get_widget("again")
    assert recreated is not None
    plane.compact()
    proxy.hold_lists("/widgets")
    proxy.restore()

    def handled() -> bool:  # both owners re-queued by the dependents' relist, and each run started or not
        after = op.logs()[logged_before:]
        return all(f"re-queue Widget {cluster.ns}/{n}" in after for n in ("again", "gone")) and \
            sum(f"uid {uid}" in after for uid in dead) == len(dead)
    try:
        wait_for(handled, 90, what="the dead owners re-queued by the dependents' relist, and handled")
    finally:
        proxy.release()
    cluster.wait_condition("again", "Successful", generation=1, timeout=90)
    after = op.logs()[logged_before:]
    started = [line for line in after.splitlines() if " run " in line and " started (generation" in line]
    for_dead = [line for line in started if any(f"uid {uid}" in line for uid in dead)]
    assert for_dead == [], "runs for objects that were gone:\n" + "\n".join(for_dead)
    assert any(f"uid {recreated['metadata']['uid']}" in line for line in started), after[-3000:]
    assert op.proc.poll() is None
