"""A network cut between the operator and the API server (a TCP proxy in between resets every connection,
open and new, until restored), with a run possibly in flight, an edit and a create made during the cut.

Pass: the operator notices (its reconnects are refused), ``/readyz`` fails while ``/healthz`` stays up
(``--api-unreachable-timeout``, issue 11 defect 8), and after the network is restored the operator is
still running, ``/readyz`` recovers and every CR converges at its current generation with its latest spec."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

from tests.faults.conftest import Cluster, wait_for, widget_watch

NS = "netcut"  # a prefix: the test's namespace is netcut-<random>


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def test_network_cut_and_restore(cluster: Cluster, operators, tmp_path: Path, figures: dict) -> None:
    ns = cluster.namespace(NS)
    proxy = cluster.proxy()
    try:
        health = free_port()
        op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"), [widget_watch()],
                       "--health-probe-bind-address", f"127.0.0.1:{health}",
                       "--api-unreachable-timeout", "2s", namespace=ns, name="netcut")
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
