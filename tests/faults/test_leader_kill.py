"""Two replicas with leader election; the leader is killed (SIGKILL, so it never releases the Lease) while
it works through a batch of new CRs.

Pass: only the leader runs anything before the kill; the stand-by takes the Lease over once it expires
(``leaseTransitions`` goes up, the holder is the stand-by), and every CR, including one edited and one
created after the kill, converges at its current generation.

The leader is the replica that runs first. On a starved machine the replica that won the Lease first can
miss its renew deadline before running anything; it then exits, as it should, and the other one leads: a
fresh replica then stands by in the exited one's place (as a restarted pod would), counted in the figures
(``standby_replaced``)."""

from __future__ import annotations

import kubernetes

from tests.faults.conftest import Cluster, Operator, wait_for, widget_watch

NS = "leader"  # a prefix: the test's namespace is leader-<random>
LEASE = "faults-widgets-lock"


def flags(ns: str) -> tuple[str, ...]:
    """Leader election with its Lease in the test's namespace ``ns``."""
    return (
        "--leader-elect",
        "--leader-election-id",
        LEASE,
        "--leader-election-namespace",
        ns,
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
    ns = cluster.namespace(NS)
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)

    def replica(name: str) -> Operator:
        return operators(cluster.kubeconfig, [widget_watch()], *flags(ns), namespace=ns, name=name)

    replicas = [replica("replica-a"), replica("replica-b")]
    wait_for(lambda: coordination.read_namespaced_lease(LEASE, ns).spec.holder_identity, 120, what="a leader")

    names = [f"w{i}" for i in range(8)]
    for n in names:
        cluster.create(ns, n, {"color": "first"})

    def first_runner() -> Operator | None:
        return next((r for r in replicas if any(r.runs(ns, n) for n in names)), None)

    try:
        leader = wait_for(first_runner, 120, 0.05, what="the leader's first run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}" + "".join(f"\n--- {r.workdir.name} log tail:\n{r.logs()[-3000:]}"
                                                 for r in replicas)) from None
    lease = coordination.read_namespaced_lease(LEASE, ns).spec
    assert (lease.holder_identity or "").endswith(f"_{leader.proc.pid}"), lease  # <hostname>_<pid>
    transitions = lease.lease_transitions or 0
    standby = next(r for r in replicas if r is not leader)
    replaced = 0
    if "lost leadership" in standby.logs() or not standby.alive():
        # It led first and, starved of CPU on a busy machine, missed its renew deadline before running
        # anything: it exited, as it should (controller-runtime does the same; its pod would be restarted).
        # A fresh replica stands by in its place.
        standby.proc.wait(60)
        standby, replaced = replica("replica-c"), 1
        wait_for(lambda: "waiting for leader election lease" in standby.logs(), 120,
                 what="the new replica standing by")
    leader.kill()
    assert not any(r.runs(ns, n) for r in replicas if r is not leader for n in names), \
        "a stand-by ran while the other replica led"

    cluster.patch(ns, names[0], {"spec": {"color": "after-kill"}})
    cluster.create(ns, "late", {"color": "late"})

    def standby_holds() -> object:
        spec = coordination.read_namespaced_lease(LEASE, ns).spec
        return spec if (spec.holder_identity or "").endswith(f"_{standby.proc.pid}") else None

    lease = wait_for(standby_holds, 120, what="the stand-by holding the Lease")
    assert (lease.lease_transitions or 0) > transitions
    cluster.wait_converged(ns, names + ["late"], timeout=300)
    wait_for(lambda: (cluster.configmap(ns, f"{names[0]}-out") or {}).get("color") == "after-kill", 60,
             what="the edit after the kill applied")
    assert standby.alive()
    figures.update(replicas=2, leader_kills=1, lease_takeovers=1, stuck_crs=0, crs=len(names) + 1,
                   standby_replaced=replaced,
                   runs_by_killed_leader=sum(1 for n in names if leader.runs(ns, n)))
