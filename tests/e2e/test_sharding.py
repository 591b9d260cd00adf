"""``run --sharding``: three replicas share the Widgets, hand them over without overlap, and take over a
killed replica's objects.

The overlap detector reads every replica's run records (``run.json`` in its own artifacts directory): a
finished run lasted ``duration_s`` up to when its record was last written (the file's mtime, sub-second,
where ``started``/``finished`` have second precision); a run still ``running`` started when its record was
written and lasts until now (or until its replica was killed). No two runs of one Widget on two replicas
may overlap in time. The detector is shown to catch an overlap with the hand-over skipped
(``--sharding-unsafe-skip-handover``).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request
from datetime import datetime, timezone
from itertools import combinations
from pathlib import Path
from typing import Iterable

import kubernetes
import pytest

from tests import kube

from .conftest import GROUP, HERE, KIND, VERSION, Cluster, OperatorProcess, default_watch, wait_for
from .proxy import TLSCutProxy

# Three operators and 30 Widgets through three generations: minutes on a loaded 2-core machine (the
# suite's other stages run beside it in CI); every wait inside is on a condition.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.parametrize("executor", ["warm"], indirect=True)]

WIDGETS = 30
# The Lease timings client-go and the SDK default to: with a 4 s renew deadline, a loaded CI machine's API
# server left a survivor's renewal unanswered long enough for it to fence itself too (CI V at 45e1acc)
LEASE, RENEW, RETRY = 15.0, 10.0, 2.0
WATCH = [default_watch(role=str(HERE / "roles" / "sleepy"), finalizer=None)]
# The tests of what each replica receives are not about timings: a longer renew deadline lets them ride out
# an API server that stalls under the CI's load (CI Z at 5dc4845: no answer for 14 s, both replicas fenced
# themselves and none was left to run the Widgets). The take-over tests give it to the survivors only: each
# replica reads another's expiry from that one's Lease (leaseDurationSeconds), so the replica that is killed
# or cut off keeps client-go's timings, and so does the bound on the take-over (the official CI at 0b8fc19:
# a took c's Widgets over, then the API server stalled for 16 s and a fenced itself too)
PATIENT = ("--leader-elect-lease-duration", "40s", "--leader-elect-renew-deadline", "30s")


def flags(cluster: Cluster, *extra: str) -> tuple[str, ...]:
    return ("--sharding", "--leader-election-id", "widgets", "--leader-election-namespace", cluster.ns,
            "--leader-elect-lease-duration", f"{LEASE:g}s", "--leader-elect-renew-deadline", f"{RENEW:g}s",
            "--leader-elect-retry-period", f"{RETRY:g}s", "--max-concurrent-reconciles", "3", *extra)


Interval = tuple[float, float]


def intervals(op: OperatorProcess, killed_at: float | None = None) -> dict[str, list[Interval]]:
    """Widget name → (start, end) of each of its runs on ``op`` (wall clock, seconds)."""
    out: dict[str, list[Interval]] = {}
    for path in (op.artifacts / GROUP / VERSION / KIND / op.namespace).glob("*/*/run.json"):
        try:
            data = json.loads(path.read_text())
            mtime = path.stat().st_mtime
        except (OSError, ValueError):
            continue
        if data.get("result") == "running":
            span = (mtime, killed_at if killed_at is not None else time.time())
        elif data.get("duration_s") is None:  # canceled: from its start (to the second, rounded down)
            started = datetime.strptime(data["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            span = (started.timestamp(), mtime)
        else:
            span = (mtime - float(data["duration_s"]), mtime)
        out.setdefault(str(data["name"]), []).append(span)
    return out


def results(op: OperatorProcess) -> dict[str, list[str]]:
    """Run result (``running``, ``successful``, ``canceled``...) → the Widgets with such a run on ``op``."""
    out: dict[str, list[str]] = {}
    for path in (op.artifacts / GROUP / VERSION / KIND / op.namespace).glob("*/*/run.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out.setdefault(str(data.get("result")), []).append(str(data["name"]))
    return out


def overlaps(replicas: dict[str, dict[str, list[Interval]]]) -> list[tuple[str, str, str]]:
    """(widget, replica, replica) for every two runs of one widget on two replicas that overlap."""
    found = []
    for (r1, runs1), (r2, runs2) in combinations(replicas.items(), 2):
        for name in set(runs1) & set(runs2):
            for s1, e1 in runs1[name]:
                for s2, e2 in runs2[name]:
                    if s1 < e2 and s2 < e1:
                        found.append((name, r1, r2))
    return found


OUTAGES = (re.compile(r"^(\S+Z) WARNING API server answers again after (\d+)s", re.MULTILINE),
           re.compile(r"^(\S+Z) WARNING shard ring \S+: listing leases failed after ([\d.]+)s", re.MULTILINE))


def outages_since(op: OperatorProcess, since: float) -> float:
    """Seconds the API server did not answer ``op`` (its own log says so: when it answers again, and each
    listing of the ring's Leases that failed, with how long it waited) in outages that ended after
    ``since``: a loaded CI machine can starve the API server itself, and no replica can take anything over
    while it gets no answer; the take-over bounds below are about the replicas."""
    total = 0.0
    for pattern in OUTAGES:
        for stamp, seconds in pattern.findall(op.logs()):
            ended = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
            if ended >= since:
                total += float(seconds)
    return total


def shard_log_since(op: OperatorProcess, since: float) -> str:
    """``op``'s log lines about the ring and the API server from ``since`` (to the second): what a failed
    take-over bound is explained by."""
    start = datetime.fromtimestamp(int(since), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "\n".join(line for line in op.logs().splitlines()
                     if line[:20] >= start and ("shard" in line or "API server" in line))


def kill(ops: Iterable[OperatorProcess]) -> None:
    """SIGKILL: the test has what it needs from these replicas; a graceful stop waits for their runs."""
    for op in ops:
        if op.proc.poll() is None:
            op.proc.kill()
            op.proc.wait(30)


def ring_leases(cluster: Cluster) -> dict[str, str | None]:
    """Member identity → the ring version its Lease says it drained for."""
    coordination = kubernetes.client.CoordinationV1Api(cluster.api)
    leases = coordination.list_namespaced_lease(
        cluster.ns, label_selector="ansible-operator.dev/shard-ring=widgets").items
    return {lease.spec.holder_identity: (lease.metadata.annotations or {}).get(
        "ansible-operator.dev/shard-drained") for lease in leases}


def settled(cluster: Cluster, members: int) -> bool:
    drained = ring_leases(cluster)
    return len(drained) == members and len(set(drained.values())) == 1 and None not in drained.values()


def all_successful(cluster: Cluster, generation: int, timeout: float = 240) -> None:
    for i in range(WIDGETS):
        cluster.wait_condition(f"w{i}", "Successful", generation=generation, timeout=timeout)


def join_with_runs_in_flight(cluster: Cluster, start_operator, *extra: str,  # type: ignore[no-untyped-def]
                             seconds: int = 4, running_first: bool = False,
                             patient: bool = False) -> dict[str, OperatorProcess]:
    """a and b run the Widgets; c joins while the runs of a new generation (``seconds`` each) are in
    flight (``running_first``: once a and b both have runs in flight, however long that takes;
    ``patient``: a and b, the survivors of the take-over tests, renew with ``PATIENT``)."""
    survivor = flags(cluster, *extra, *(PATIENT if patient else ()))
    ops = {"a": start_operator(WATCH, *survivor, name="a"),
           "b": start_operator(WATCH, *survivor, name="b")}
    wait_for(lambda: len(ring_leases(cluster)) == 2 or None, 90, what="two members")
    for i in range(WIDGETS):
        cluster.create_widget(f"w{i}", {"seconds": 1})
    all_successful(cluster, 1)
    for i in range(WIDGETS):
        cluster.patch_widget(f"w{i}", {"spec": {"seconds": seconds}})
    if running_first:
        wait_for(lambda: all(results(ops[r]).get("running") for r in ("a", "b")), 120,
                 what="runs in flight on a and b")
    ops["c"] = start_operator(WATCH, *flags(cluster, *extra), name="c")
    return ops


def test_three_replicas_share_hand_over_and_take_over(cluster: Cluster, start_operator) -> None:
    # workers for every Widget a replica may hold: the take-over bound is about when the survivors start
    # the killed replica's Widgets, not about how fast 3 workers get through 15 of them (CI V at 45e1acc:
    # the last one started 16.5 s after the kill, 8 s after its new owner took it over)
    ops = join_with_runs_in_flight(cluster, start_operator, "--max-concurrent-reconciles", "20", patient=True)
    all_successful(cluster, 2)
    wait_for(lambda: settled(cluster, 3), 60, what="three members drained for one ring")

    # settled: each replica runs about a third of the Widgets
    for i in range(WIDGETS):
        cluster.patch_widget(f"w{i}", {"spec": {"seconds": 1}})
    all_successful(cluster, 3)
    gen3 = {r: {name for name in (f"w{i}" for i in range(WIDGETS))
                if any(run.get("generation") == 3 for run in op.runs(name))} for r, op in ops.items()}
    print("generation 3 runs per replica:", {r: len(names) for r, names in gen3.items()})
    assert sorted(set().union(*gen3.values())) == sorted(f"w{i}" for i in range(WIDGETS))
    assert sum(len(names) for names in gen3.values()) == WIDGETS, "a Widget ran on two replicas"
    # a third of 30 random uids each: 10 ± 2.6 (binomial) and the ring's own ±10 %
    assert all(3 <= len(names) <= 18 for names in gen3.values()), gen3

    # kill -9 one: the others run its Widgets within the lease duration + 10 s
    victim = ops["c"]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    killed_at = time.time()
    orphans = gen3["c"]

    def taken_over() -> dict[str, float] | None:
        first: dict[str, float] = {}
        for r in ("a", "b"):
            for name, spans in intervals(ops[r]).items():
                starts = [s for s, _ in spans if s > killed_at and name in orphans]
                if starts:
                    first[name] = min(starts + [first.get(name, float("inf"))])
        return first if set(first) == orphans else None

    first = wait_for(taken_over, 90, what="the killed replica's Widgets run elsewhere")
    delay = max(first.values()) - killed_at
    outage = max(outages_since(ops[r], killed_at) for r in ("a", "b"))
    print(f"{len(orphans)} Widgets of the killed replica started elsewhere within {delay:.1f}s"
          f" (API server outages meanwhile: {outage:.0f}s)")
    assert delay < LEASE + 10 + outage, "\n".join(shard_log_since(ops[r], killed_at) for r in ("a", "b"))

    runs = {"c": intervals(victim, killed_at), "a": intervals(ops["a"]), "b": intervals(ops["b"])}
    print("runs per replica:", {r: sum(len(s) for s in spans.values()) for r, spans in runs.items()})
    assert overlaps(runs) == []


@pytest.mark.timeout(600)
def test_the_overlap_detector_catches_a_broken_handover(cluster: Cluster, start_operator) -> None:
    """The same join with the drained check skipped: c starts Widgets a and b still run."""
    # runs that outlast any start-up of c, 10 workers each: a and b run 20 of the 30 Widgets' new
    # generation when c starts, and c starts the ~10 it owns at once, so some are surely still running on
    # a or b. With 30 s runs, c started on a loaded CI machine after a and b had finished theirs (the
    # official run at e3f3c53); with 3 workers, c could start first only Widgets a and b had not started
    ops = join_with_runs_in_flight(cluster, start_operator, "--sharding-unsafe-skip-handover",
                                   "--max-concurrent-reconciles", "10", seconds=900, running_first=True)

    def overlapping() -> list[tuple[str, str, str]] | None:
        return overlaps({r: intervals(op) for r, op in ops.items()}) or None

    try:
        found = wait_for(overlapping, 240, what="an overlap")
    finally:
        kill(ops.values())  # rather than wait for their runs to end at the teardown
    print("overlaps with the hand-over skipped:", found)
    assert found


@pytest.mark.skipif(not kube.real(), reason="cuts the network to the real control plane")
def test_a_replica_cut_off_fences_itself_before_the_other_takes_over(
        cluster: Cluster, start_operator, tmp_path: Path) -> None:
    """c reaches the API server through a proxy that is cut while c runs Widgets: c cannot renew its Lease,
    fences itself (cancels its runs, exits 1) before a sees the Lease expire and runs c's Widgets."""
    proxy = TLSCutProxy.in_front_of(cluster.kubeconfig, None).start()
    try:
        via = proxy.write_kubeconfig(cluster.kubeconfig, tmp_path / "via-proxy.kubeconfig")
        # as many workers as Widgets: a starts c's Widgets as soon as it owns them, not behind its own runs
        wide = flags(cluster, "--max-concurrent-reconciles", "12")
        a = start_operator(WATCH, *wide, *PATIENT, name="a")
        c = start_operator(WATCH, *wide, name="c", kubeconfig=via)
        wait_for(lambda: settled(cluster, 2), 90, what="two members drained for one ring")
        names = [f"w{i}" for i in range(12)]
        for name in names:
            cluster.create_widget(name, {"seconds": 30})

        in_flight = wait_for(lambda: results(c).get("running"), 120, what="runs in flight on c")
        proxy.cut()
        cut_at = time.time()
        c.proc.wait(60)
        exited = time.time() - cut_at
        assert c.proc.returncode == 1
        assert "fenced" in c.logs()
        assert set(results(c).get("canceled", [])) >= set(in_flight)

        def taken_over() -> bool:
            return all(any(s > cut_at for s, _ in intervals(a).get(n, [])) for n in in_flight)

        try:
            wait_for(taken_over, 90, what="a runs the Widgets c was running")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{shard_log_since(a, cut_at - 10)}") from None
        starts = [min(s for s, _ in intervals(a)[n] if s > cut_at) for n in in_flight]
        outage = outages_since(a, cut_at)
        print(f"c exited {exited:.1f}s after the cut; a started c's {len(in_flight)} Widget(s)"
              f" {min(starts) - cut_at:.1f}-{max(starts) - cut_at:.1f}s after it (API server outages"
              f" for a meanwhile: {outage:.0f}s)")
        assert max(starts) - cut_at < LEASE + 10 + outage, shard_log_since(a, cut_at)
        assert overlaps({"a": intervals(a), "c": intervals(c)}) == []
        kill([a])  # rather than wait for its 30 s runs to end at the teardown
    finally:
        proxy.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cached(port: int) -> float | None:
    """``ansible_operator_cached_objects`` of the Widget watch on one replica's /metrics."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("ansible_operator_cached_objects{") and KIND in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def held_once(ports: dict[str, int], n: int) -> dict[str, float]:
    """Wait until the replicas' watches (their ``/metrics`` on ``ports``) hold the ``n`` Widgets once in all;
    how many each holds."""
    def split() -> dict[str, float] | None:
        held = {r: _cached(port) for r, port in ports.items()}
        counts = {r: v for r, v in held.items() if v is not None}
        return counts if len(counts) == len(held) and sum(counts.values()) == n else None

    found: dict[str, float] = wait_for(split, 60, what="the replicas' caches holding each Widget once")
    return found


def _serves_shard_selectors(cluster: Cluster) -> bool:
    """A server that parses ``shardSelector`` refuses a malformed one (start past end: v1.36 answers 500
    "invalid shard selector" for custom resources); one that ignores it answers (custom resource lists
    carry no ``metadata.shardInfo``)."""
    try:
        cluster.api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.ns}/widgets", "GET", auth_settings=["BearerToken"],
            query_params=[("limit", "1"), ("shardSelector", "shardRange(object.metadata.uid,"
                                                            " '0x0000000000000001', '0x0000000000000000')")],
            response_type="object", _return_http_data_only=True)
    except kubernetes.client.ApiException as exc:
        return exc.status in (400, 500) and "invalid shard selector" in str(exc.body)
    return False


def test_with_shard_selectors_each_replica_receives_only_its_shard(cluster: Cluster, start_operator) -> None:
    """``--shard-selector``: the API server sends each replica only the Widgets of its shard; together
    they hold each Widget once, run every one, and when one replica leaves, the other lists the whole
    space again and runs its Widgets."""
    if not _serves_shard_selectors(cluster):
        pytest.skip("this kube-apiserver does not serve shardSelector (Kubernetes >= 1.36 with the"
                    " ShardedListAndWatch feature gate: tests/kube.py turns it on where it exists)")
    ports = {r: free_port() for r in ("a", "b")}
    ops = {r: start_operator(WATCH, *flags(cluster, "--shard-selector", "--metrics-bind-address",
                                           f"127.0.0.1:{ports[r]}", *PATIENT), name=r) for r in ("a", "b")}
    wait_for(lambda: settled(cluster, 2), 90, what="two members drained for one ring")
    n = 20
    for i in range(n):
        cluster.create_widget(f"w{i}", {"seconds": 1})
    for i in range(n):
        cluster.wait_condition(f"w{i}", "Successful", generation=1, timeout=240)

    held = held_once(ports, n)
    print("Widgets each replica's watch holds:", held)
    assert all(0 < v < n for v in held.values()), held
    for op in ops.values():
        assert "the API server lists and watches this replica's shard only" in op.logs()

    # b leaves: a's ring is the whole space, it lists again and holds (and runs) every Widget
    ops["b"].stop()
    wait_for(lambda: _cached(ports["a"]) == n or None, 90, what="a holding every Widget")
    for i in range(n):
        cluster.patch_widget(f"w{i}", {"spec": {"seconds": 0}})
    for i in range(n):
        cluster.wait_condition(f"w{i}", "Successful", generation=2, timeout=240)
    assert overlaps({r: intervals(op) for r, op in ops.items()}) == []


def test_with_shard_labels_each_replica_receives_only_its_buckets(cluster: Cluster, start_operator) -> None:
    """``--shard-label`` (any Kubernetes): the replicas label every Widget with its hash bucket, those made
    before they started too, and each watches only its buckets; together they hold each Widget once and
    run every one. A Widget whose label a user removed is labelled again and keeps running; when one
    replica leaves, the other watches every bucket and runs all the Widgets."""
    from ansible_operator.sharding.ring import bucket_label

    label = "ansible-operator.dev/shard-bucket"
    n = 20
    for i in range(n // 2):  # before the operator: unlabelled
        cluster.create_widget(f"w{i}", {"seconds": 1})
    ports = {r: free_port() for r in ("a", "b")}
    ops = {r: start_operator(WATCH, *flags(cluster, "--shard-label", "--metrics-bind-address",
                                           f"127.0.0.1:{ports[r]}", *PATIENT), name=r) for r in ("a", "b")}
    wait_for(lambda: settled(cluster, 2), 90, what="two members drained for one ring")
    for i in range(n // 2, n):
        cluster.create_widget(f"w{i}", {"seconds": 1})
    for i in range(n):
        cluster.wait_condition(f"w{i}", "Successful", generation=1, timeout=240)

    def labels_right() -> bool:
        widgets = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, cluster.ns, "widgets")["items"]
        return len(widgets) == n and all(
            (w["metadata"].get("labels") or {}).get(label) == bucket_label(w["metadata"]["uid"], "uid")
            for w in widgets)

    wait_for(labels_right, 60, what="every Widget labelled with its bucket")

    held = held_once(ports, n)
    print("Widgets each replica's watch holds:", held)
    assert all(0 < v < n for v in held.values()), held

    # a user removes the label: it leaves its owner's watch (not deleted there), is labelled again, runs
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, cluster.ns, "widgets", "w0",
                                                  {"metadata": {"labels": {label: None}}})
    wait_for(labels_right, 60, what="w0 labelled again")
    cluster.patch_widget("w0", {"spec": {"seconds": 0}})
    cluster.wait_condition("w0", "Successful", generation=2, timeout=120)

    # b leaves: a watches every bucket, holds (and runs) every Widget
    ops["b"].stop()
    wait_for(lambda: _cached(ports["a"]) == n or None, 90, what="a holding every Widget")
    for i in range(1, n):
        cluster.patch_widget(f"w{i}", {"spec": {"seconds": 0}})
    for i in range(n):
        cluster.wait_condition(f"w{i}", "Successful", generation=2, timeout=240)
    assert overlaps({r: intervals(op) for r, op in ops.items()}) == []
