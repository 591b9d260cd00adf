"""A network cut between the operator and the API server (a TCP proxy in between resets every connection,
open and new, until restored), with a run possibly in flight, an edit and a create made during the cut.

Pass: the operator notices (its reconnects are refused), ``/readyz`` fails while ``/healthz`` stays up
(``--api-unreachable-timeout``, issue 11 defect 8), and after the network is restored the operator is
still running, ``/readyz`` recovers and every CR converges at its current generation with its latest spec."""

from __future__ import annotations

from pathlib import Path

from tests.faults.conftest import Cluster, operator_via_proxy, probe, wait_for

NS = "netcut"  # a prefix: the test's namespace is netcut-<random>


def test_network_cut_and_restore(cluster: Cluster, operators, tmp_path: Path, figures: dict) -> None:
    ns = cluster.namespace(NS)
    via = operator_via_proxy(cluster, operators, tmp_path, ns, "netcut", unreachable_timeout="2s")
    op, proxy, health = via.op, via.proxy, via.health
    try:
        cluster.create(ns, "steady", {"color": "one"})
        cluster.wait_converged(ns, ["steady"])
        wait_for(lambda: probe(health, "/readyz") == 200, 60, what="/readyz 200 before the cut")
        lists_before = proxy.relists()

        cluster.create(ns, "inflight", {"color": "two"})
        proxy.cut()
        cluster.patch(ns, "steady", {"spec": {"color": "edited"}})
        cluster.create(ns, "during", {"color": "three"})
        wait_for(lambda: proxy.refused >= 3, 120, what="the operator's reconnects refused")
        wait_for(lambda: probe(health, "/readyz") not in (0, 200), 60, what="/readyz failing during the cut")
        assert probe(health, "/healthz") == 200
        assert op.alive()
        proxy.restore()

        objs = cluster.wait_converged(ns, ["steady", "inflight", "during"], timeout=300)
        assert objs[0]["metadata"]["generation"] == 2
        wait_for(lambda: (cluster.configmap(ns, "steady-out") or {}).get("color") == "edited", 60,
                 what="steady-out shows the edit made during the cut")
        wait_for(lambda: probe(health, "/readyz") == 200, 60, what="/readyz 200 after the restore")
        assert op.alive()
        figures.update(cuts=1, refused_connections=proxy.refused, relists=proxy.relists() - lists_before,
                       stuck_crs=0, crs=3)
    finally:
        proxy.close()
