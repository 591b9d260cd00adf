"""A watch gap that ends in 410 Gone: while the operator is cut off from the API server, CRs are edited,
deleted, deleted and re-created under the same name, and created; the watch history is then compacted, so
the operator's watch cannot resume and it must re-list (issue 11, defect 1).

On the real backend the test has a control plane of its own whose API server runs with
``--watch-cache=false``: watches are then served by etcd itself, and after an etcd compaction a watch
resumed from an older resourceVersion gets the real ``410 Gone`` ("The resourceVersion for the provided
watch is too old.", k8s.io/apiserver storage/etcd3 ``interpretWatchError``). With the watch cache on
(the default) the cache keeps serving old resourceVersions after an etcd compaction and there is no gap
to recover from. On the sandbox: its test-only ``Store.compact()``.

Pass: after the network comes back, every CR that exists converges at its current generation with the
spec it has now (the re-created one included, although its generation is 1 again), the deleted CR's run
artifacts are removed, and the operator got a 410 and re-listed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import kube
from tests.faults.conftest import GROUP, KIND, VERSION, Cluster, private_cluster, wait_for, widget_watch

NS = "gap"  # a prefix: the test's namespace is gap-<random>


@pytest.fixture
def gap_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A real control plane of the test's own without the watch cache, or the module's sandbox."""
    if kube.real():
        with private_cluster(tmp_path / "plane", apiserver_args=["--watch-cache=false"]) as c:
            yield c
    else:
        yield request.getfixturevalue("cluster")


def test_deletes_recreates_and_edits_during_a_410_gap_converge(gap_cluster: Cluster, operators,
                                                               tmp_path: Path, figures: dict) -> None:
    cluster = gap_cluster
    ns = cluster.namespace(NS)
    proxy = cluster.proxy()
    # No dependent watches: a re-queue because the old object's ConfigMap was garbage-collected must not
    # stand in for the relist noticing the re-created object (the role of issue 11 had no owned objects).
    op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"),
                   [widget_watch(watchDependentResources=False)], namespace=ns)
    try:
        for name in ("keep", "gone", "reborn", "steady"):
            cluster.create(ns, name, {"color": "first"})
        cluster.wait_converged(ns, ["keep", "gone", "reborn", "steady"])
        old_reborn_uid = cluster.read(ns, "reborn")["metadata"]["uid"]
        gone_artifacts = op.artifacts / GROUP / VERSION / KIND / ns / "gone"
        assert any(gone_artifacts.glob("*/run.json"))
        lists_before, expired_before = proxy.relists(), proxy.expired

        proxy.cut()
        cluster.patch(ns, "keep", {"spec": {"color": "edited"}})
        cluster.delete(ns, "gone")
        cluster.delete(ns, "reborn")
        wait_for(lambda: cluster.get(ns, "reborn") is None, 30, what="reborn deleted")
        reborn = cluster.create(ns, "reborn", {"color": "second"})
        assert reborn["metadata"]["uid"] != old_reborn_uid and reborn["metadata"]["generation"] == 1
        cluster.create(ns, "newcomer", {"color": "new"})
        compacted_at = cluster.compact()
        assert compacted_at >= int(reborn["metadata"]["resourceVersion"])
        proxy.restore()

        objs = cluster.wait_converged(ns, ["keep", "reborn", "steady", "newcomer"])
        assert objs[0]["metadata"]["generation"] == 2
        wait_for(lambda: (cluster.configmap(ns, "keep-out") or {}).get("color") == "edited", 60,
                 what="keep-out shows the edit")
        wait_for(lambda: (cluster.configmap(ns, "reborn-out") or {}).get("color") == "second", 60,
                 what="reborn-out written by the re-created object's run")
        assert (cluster.configmap(ns, "newcomer-out") or {}).get("color") == "new"
        wait_for(lambda: not gone_artifacts.exists() or not any(gone_artifacts.iterdir()), 60,
                 what="the deleted CR's run artifacts removed")
        assert proxy.expired > expired_before, "the watch gap did not end in 410 Expired"
        assert proxy.relists() > lists_before, "the operator did not re-list after the 410"
        assert op.alive()
        figures.update(cuts=1, compactions=1, expired_410=proxy.expired - expired_before,
                       relists=proxy.relists() - lists_before, stuck_crs=0, crs=4)
    finally:
        op.stop()  # before its API server (a private control plane) stops
        proxy.close()
