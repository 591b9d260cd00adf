"""API server (or etcd) SIGKILL and restart under a running operator.

* Sandbox backend: the sandbox runs as its own process with ``--data-dir`` (SQLite); it is killed and
  started again on the same port and data directory. Its watch history starts empty after a restart: a
  watch resuming from an older resourceVersion than the last persisted one gets 410 and re-lists, one that
  had seen everything just resumes.
* Real backend: a control plane of the test's own; ``kube-apiserver`` is killed and started again (same
  port, certificates and etcd: its watch cache is rebuilt from etcd), or ``etcd`` is (same data directory;
  the API server stays up and answers errors until it reconnects). The etcd test needs etcd: real only.

The kill comes right after a CR was created (its run may be in flight).

Pass: the operator survives; objects written before the kill are still there; the CR created just before
the kill, an edit and a new CR made after the restart all converge at their current generation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ansible_operator_sandbox.testing import SandboxProcess, start_process
from tests import kube
from tests.faults.conftest import CRDS, Cluster, private_cluster, wait_for, widget_watch

NS = "apikill"  # a prefix: the test's namespace is apikill-<random>


def kill_restart_converge(cluster: Cluster, kill_and_restart: Callable[[], None], operators, tmp_path: Path,
                          figures: dict, **kill_figures: int) -> None:
    """The scenario: a CR converged, a CR created and the API server or etcd killed and restarted at once,
    then an edit and a create; everything converges."""
    ns = cluster.namespace(NS)
    proxy = cluster.proxy()
    op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"), [widget_watch()], namespace=ns,
                   name="apikill")
    try:
        cluster.create(ns, "before", {"color": "one"})
        cluster.wait_converged(ns, ["before"], 120)
        lists_before, expired_before = proxy.relists(), proxy.expired

        cluster.create(ns, "inflight", {"color": "two"})
        kill_and_restart()
        cluster.reconnect()  # the test's pooled connections died with the server
        assert cluster.read(ns, "before")["spec"] == {"color": "one"}
        cluster.patch(ns, "before", {"spec": {"color": "three"}})
        cluster.create(ns, "after", {"color": "four"})
        cluster.wait_converged(ns, ["before", "inflight", "after"], 240)
        assert (cluster.configmap(ns, "before-out") or {}).get("color") == "three"
        assert (cluster.configmap(ns, "inflight-out") or {}).get("color") == "two"
        assert (cluster.configmap(ns, "after-out") or {}).get("color") == "four"
        assert op.alive(), op.logs()[-3000:]
        figures.update(**kill_figures, relists=proxy.relists() - lists_before,
                       expired_410=proxy.expired - expired_before, stuck_crs=0, crs=3)
    finally:
        op.stop()  # before its API server stops
        proxy.close()


def test_api_server_sigkill_and_restart_on_same_data_dir(operators, tmp_path: Path, figures: dict) -> None:
    if kube.real():
        with private_cluster(tmp_path / "plane") as cluster:
            plane = cluster.plane
            assert plane is not None
            kill_restart_converge(cluster, lambda: plane.restart("kube-apiserver", kill=True), operators,
                                  tmp_path, figures, api_server_kills=1, api_server_restarts=1)
        return

    data_dir = tmp_path / "data"
    sandbox = start_process(tmp_path / "sandbox.kubeconfig", data_dir=data_dir, crds=[CRDS])
    started: list[SandboxProcess] = [sandbox]
    cluster = Cluster.of_kubeconfig(sandbox.kubeconfig)

    def kill_and_restart() -> None:
        sandbox.proc.kill()
        sandbox.proc.wait(30)
        started.append(start_process(tmp_path / "sandbox.kubeconfig", port=sandbox.port, data_dir=data_dir,
                                     crds=[CRDS]))

    try:
        kill_restart_converge(cluster, kill_and_restart, operators, tmp_path, figures, api_server_kills=1,
                              api_server_restarts=1)
    finally:
        cluster.close()
        for s in started:
            s.stop()


def test_etcd_sigkill_and_restart_on_same_data_dir(operators, tmp_path: Path, figures: dict) -> None:
    if not kube.real():
        pytest.skip("the sandbox has no etcd (its own storage is killed with it: the test above)")
    with private_cluster(tmp_path / "plane") as cluster:
        plane = cluster.plane
        assert plane is not None

        def kill_and_restart() -> None:
            plane.restart("etcd", kill=True)
            # the API server stayed up; it answers again once it has reconnected to etcd
            wait_for(lambda: plane.request("GET", "/readyz")[0] == 200, 120,
                     what="kube-apiserver ready after the etcd restart")

        kill_restart_converge(cluster, kill_and_restart, operators, tmp_path, figures, etcd_kills=1,
                              etcd_restarts=1)
