"""The API server refuses requests with ``429 Too Many Requests`` while a batch of CRs is reconciled: nothing
is lost, every 429 is met with a retry after a backoff.

A real control plane of the test's own with ``--enable-priority-and-fairness=false`` and tiny in-flight
limits (``--max-requests-inflight=1``, ``--max-mutating-requests-inflight=1``): k8s.io/apiserver's
``WithMaxInFlightLimit`` filter then answers a request beyond the limit with 429 and ``Retry-After: 1`` at
once. (With priority and fairness on, the two flags only size its total concurrency and requests wait in
queues first.) Long-running requests (watches) are exempt, and so is ``system:masters``: the operator talks
through the proxy as a user of its own, bound to ``cluster-admin`` but not in that group; the test's own
client (admin) is never throttled. The sandbox has no request limits: real backend only.

Pass: every CR converges at its generation with its spec applied (its ConfigMap), the operator is still
running, its own calls (status writes, Events) waited out ``Retry-After`` instead of failing a reconcile or
dropping an Event (a role's module call answered 429 fails its run, which the work queue retries after its
backoff), and 429s really happened: counted on the operator's own connections by the proxy, and no more than
the API server itself says it answered (``apiserver_request_total{code="429"}``)."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes
import pytest

from tests import kube
from tests.faults.conftest import private_cluster, widget_watch

pytestmark = pytest.mark.slow  # over ~20 s each: started first (tests/conftest.py)

NS = "throttle"  # a prefix: the test's namespace is throttle-<random>
USER = "faults-throttled"
CRS = 24
LIMITS = ["--enable-priority-and-fairness=false", "--max-requests-inflight=1",
          "--max-mutating-requests-inflight=1"]


def server_429s(metrics: str) -> int:
    """429 answers the API server counted (every client, every verb)."""
    return sum(int(float(m.group(1))) for m in re.finditer(
        r'^apiserver_request_total\{[^}]*code="429"[^}]*\} (\S+)$', metrics, re.MULTILINE))


def _lines(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line][:5]


def test_429s_are_retried_and_nothing_is_lost(operators, tmp_path: Path, figures: dict) -> None:
    if not kube.real():
        pytest.skip("the sandbox has no request limits (no 429): needs the real API server")
    with private_cluster(tmp_path / "plane", apiserver_args=LIMITS) as cluster:
        plane, pki = cluster.plane, cluster.pki
        assert plane is not None and pki is not None
        rbac = "rbac.authorization.k8s.io"
        kubernetes.client.RbacAuthorizationV1Api(cluster.api).create_cluster_role_binding({
            "metadata": {"name": USER},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": USER}]})
        ns = cluster.namespace(NS)
        proxy = cluster.proxy(client=plane.client_certificate(USER))
        op = operators(proxy.write_kubeconfig(tmp_path / "via-proxy.kubeconfig"), [widget_watch()],
                       "--max-concurrent-reconciles", "8", namespace=ns, name="throttled")
        try:
            names = [f"t{i:02d}" for i in range(CRS)]
            for name in names:
                cluster.create(ns, name, {"color": f"c-{name}"})
            cluster.wait_converged(ns, names, timeout=300)
            for name in names:
                assert (cluster.configmap(ns, f"{name}-out") or {}).get("color") == f"c-{name}", name
            assert op.alive(), op.logs()[-3000:]
            # The runner's own calls (status writes, Events) wait out Retry-After and send again: a 429 never
            # fails a reconcile through them, and no Event is dropped. A role's module call answered 429
            # fails its task (the Python client does not retry; the same with Operator SDK): that run fails
            # and the work queue runs it again after its backoff.
            logs = op.logs()
            assert "raised; treating it as failed" not in logs, _lines(logs, "raised; treating it as failed")
            assert "API request failed" not in logs, _lines(logs, "API request failed")
            assert not _lines(logs, "could not record event"), _lines(logs, "could not record event")
            runs = [r for n in names for r in op.runs(ns, n)]
            seen = proxy.statuses[429]
            status, metrics = plane.request("GET", "/metrics")
            assert status == 200, metrics
            answered = server_429s(metrics)
            assert seen > 0, f"no 429 reached the operator ({dict(proxy.statuses)}); the server counted " \
                             f"{answered}"
            assert seen <= answered, (seen, answered)
            figures.update(crs=CRS, stuck_crs=0, throttled_429=seen, server_429=answered,
                           requests=sum(proxy.statuses.values()), runs=len(runs),
                           failed_runs=sum(1 for r in runs if r["result"] != "successful"))
        finally:
            op.stop()  # before its API server stops
            proxy.close()
