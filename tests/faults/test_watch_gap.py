"""A watch gap that ends in 410 Gone: while the operator is cut off from the API server, CRs are edited,
deleted, deleted and re-created under the same name, and created; the sandbox then compacts its watch
history, so the operator's watch cannot resume and it must re-list (issue 11, defect 1).

Pass: after the network comes back, every CR that exists converges at its current generation with the
spec it has now (the re-created one included, although its generation is 1 again), the deleted CR's run
artifacts are removed, and the operator got a 410 and re-listed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import GROUP, KIND, VERSION, Cluster, CutProxy, wait_for, widget_watch

NS = "gap"


@pytest.fixture(scope="module")
def proxy(cluster: Cluster) -> Iterator[CutProxy]:
    p = CutProxy(cluster.handle.sandbox.port).start()
    yield p
    p.close()


def test_deletes_recreates_and_edits_during_a_410_gap_converge(cluster: Cluster, proxy: CutProxy, operators,
                                                               tmp_path: Path, figures: dict) -> None:
    cluster.namespace(NS)
    # No dependent watches: a re-queue because the old object's ConfigMap was garbage-collected must not
    # stand in for the relist noticing the re-created object (the role of issue 11 had no owned objects).
    op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"),
                   [widget_watch(watchDependentResources=False)], "--namespace", NS)
    for name in ("keep", "gone", "reborn", "steady"):
        cluster.create(NS, name, {"color": "first"})
    cluster.wait_converged(NS, ["keep", "gone", "reborn", "steady"])
    old_reborn_uid = cluster.read(NS, "reborn")["metadata"]["uid"]
    gone_artifacts = op.artifacts / GROUP / VERSION / KIND / NS / "gone"
    assert any(gone_artifacts.glob("*/run.json"))
    lists_before, expired_before = proxy.relists(), proxy.expired

    proxy.cut()
    cluster.patch(NS, "keep", {"spec": {"color": "edited"}})
    cluster.delete(NS, "gone")
    cluster.delete(NS, "reborn")
    wait_for(lambda: cluster.get(NS, "reborn") is None, 30, what="reborn deleted")
    reborn = cluster.create(NS, "reborn", {"color": "second"})
    assert reborn["metadata"]["uid"] != old_reborn_uid and reborn["metadata"]["generation"] == 1
    cluster.create(NS, "newcomer", {"color": "new"})
    compacted_at = cluster.compact()
    assert compacted_at >= int(reborn["metadata"]["resourceVersion"])
    proxy.restore()

    objs = cluster.wait_converged(NS, ["keep", "reborn", "steady", "newcomer"])
    assert objs[0]["metadata"]["generation"] == 2
    wait_for(lambda: (cluster.configmap(NS, "keep-out") or {}).get("color") == "edited", 60,
             what="keep-out shows the edit")
    wait_for(lambda: (cluster.configmap(NS, "reborn-out") or {}).get("color") == "second", 60,
             what="reborn-out written by the re-created object's run")
    assert (cluster.configmap(NS, "newcomer-out") or {}).get("color") == "new"
    wait_for(lambda: not gone_artifacts.exists() or not any(gone_artifacts.iterdir()), 60,
             what="the deleted CR's run artifacts removed")
    assert proxy.expired > expired_before, "the watch gap did not end in 410 Expired"
    assert proxy.relists() > lists_before, "the operator did not re-list after the 410"
    assert op.alive()
    figures.update(cuts=1, compactions=1, expired_410=proxy.expired - expired_before,
                   relists=proxy.relists() - lists_before, stuck_crs=0, crs=4)
