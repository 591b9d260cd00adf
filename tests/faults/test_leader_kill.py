"""Two replicas with leader election; the leader is killed (SIGKILL, so it never releases the Lease) while
it works through a batch of new CRs.

Pass: only the leader runs anything before the kill; the stand-by takes the Lease over once it expires
(``leaseTransitions`` goes up, the holder is the stand-by), and every CR, including one edited and one
created after the kill, converges at its current generation."""

from __future__ import annotations

import kubernetes

from tests.faults.conftest import Cluster, wait_for, widget_watch

NS = "leader"
LEASE = "faults-widgets-lock"
FLAGS = (
    "--namespace",
    NS,
    "--leader-elect",
    "--leader-election-id",
    LEASE,
    "--leader-election-namespace",
    NS,
    # Short enough for a quick takeover, long enough that a leader starved of CPU (CI beside a CPU hog)
    # still renews: with 4 s / 3 s it lost the Lease before its first run once, and exited as it should.
    "--leader-elect-lease-duration",
    "8s",
    "--leader-elect-renew-deadline",
    "6s",
    "--leader-elect-retry-period",
    "1s",
)


def test_leader_killed_mid_batch_standby_takes_over(cluster: Cluster, operators, figures: dict) -> None:
    cluster.namespace(NS)
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)
    a = operators(cluster.kubeconfig, [widget_watch()], *FLAGS, name="replica-a")
    b = operators(cluster.kubeconfig, [widget_watch()], *FLAGS, name="replica-b")
    holder = wait_for(lambda: coordination.read_namespaced_lease(LEASE, NS).spec.holder_identity, 120,
                      what="a leader")
    leader = a if holder.endswith(f"_{a.proc.pid}") else b  # the identity is <hostname>_<pid>
    standby = b if leader is a else a
    assert holder.endswith(f"_{leader.proc.pid}")
    transitions = coordination.read_namespaced_lease(LEASE, NS).spec.lease_transitions or 0

    names = [f"w{i}" for i in range(8)]
    for n in names:
        cluster.create(NS, n, {"color": "first"})
    try:
        wait_for(lambda: any(leader.runs(NS, n) for n in names), 120, 0.05, what="the leader's first run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- leader log tail:\n{leader.logs()[-3000:]}"
                             f"\n--- stand-by log tail:\n{standby.logs()[-3000:]}") from None
    leader.kill()
    assert not any(standby.runs(NS, n) for n in names), "the stand-by ran while the other replica led"

    cluster.patch(NS, names[0], {"spec": {"color": "after-kill"}})
    cluster.create(NS, "late", {"color": "late"})
    def standby_holds() -> object:
        spec = coordination.read_namespaced_lease(LEASE, NS).spec
        return spec if (spec.holder_identity or "").endswith(f"_{standby.proc.pid}") else None

    lease = wait_for(standby_holds, 120, what="the stand-by holding the Lease")
    assert (lease.lease_transitions or 0) > transitions
    cluster.wait_converged(NS, names + ["late"], timeout=300)
    wait_for(lambda: (cluster.configmap(NS, f"{names[0]}-out") or {}).get("color") == "after-kill", 60,
             what="the edit after the kill applied")
    assert standby.alive()
    figures.update(replicas=2, leader_kills=1, lease_takeovers=1, stuck_crs=0, crs=len(names) + 1,
                   runs_by_killed_leader=sum(1 for n in names if leader.runs(NS, n)))
