"""Fair work under load (issue 24), against the real operator: a new object does not wait behind the
resyncs of converged ones, and a restart re-checks converged objects later instead of first.

Ordering is read back from run.json (``started``, second precision; the ``slow`` role takes over a second
and one worker runs at a time, so runs start in distinct seconds), not from wall-clock thresholds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ansible_operator.status import converged

from .conftest import HERE, Cluster, OperatorProcess, default_watch, one_executor, wait_for

pytestmark = one_executor  # about the queue, not the executor

CONVERGED = [f"old{i}" for i in range(5)]
DONE = [f"done{i}" for i in range(4)]


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _starts(op: OperatorProcess, names: list[str]) -> list[tuple[datetime, str]]:
    return sorted((_time(r["started"]), name) for name in names for r in op.runs(name, "reconcile"))


def test_a_new_widget_runs_before_the_resync_backlog_drains(cluster: Cluster, start_operator: Any) -> None:
    # Reconcile period 1 s, one worker, runs of over a second: the converged widgets are always due again
    # long before a pass over them ends, so a backlog of resyncs is queued all the time.
    op = start_operator([default_watch(role=str(HERE / "roles" / "slow"), finalizer=None,
                                       reconcilePeriod="1s")], "--max-concurrent-reconciles=1")
    for name in CONVERGED:
        cluster.create_widget(name, {"color": "blue"})
    for name in CONVERGED:
        cluster.wait_condition(name, "Successful", generation=1)
    # Every one of them has been resynced at least once: the backlog is there.
    wait_for(lambda: all(len(op.runs(n, "reconcile")) >= 2 for n in CONVERGED), 180, what="resyncs")

    created = _time(cluster.create_widget("new", {"color": "red"})["metadata"]["creationTimestamp"])
    cluster.wait_condition("new", "Successful", generation=1)
    new_start = _time(op.runs("new", "reconcile")[0]["started"])
    # The backlog was still there when it ran: resyncs of converged widgets keep starting after it.
    wait_for(lambda: len([t for t, _ in _starts(op, CONVERGED) if t > new_start]) >= 3, 120,
             what="resyncs after the new widget's run")

    # Between its creation and its run, at most the run in flight then finished (a plain FIFO puts it
    # behind the whole backlog: ~4 resyncs of over a second each).
    overtaken = [name for t, name in _starts(op, CONVERGED) if created < t < new_start]
    assert len(overtaken) <= 1, (created, new_start, overtaken)


def test_a_restart_runs_unconverged_widgets_first_and_spreads_converged_ones(
        cluster: Cluster, start_operator: Any) -> None:
    watch = default_watch(finalizer=None)
    first = start_operator([watch], name="first")
    for name in (*DONE, "edited"):
        cluster.create_widget(name, {"color": "blue"})
    for name in (*DONE, "edited"):
        cluster.wait_condition(name, "Successful", generation=1)
    assert first.stop() == 0
    # What the second operator will find. A run the first one was still doing when it stopped (one its
    # own dependent watch queued, say) left its widget "Running": not converged, so it runs at once.
    unconverged = [name for name in DONE if not converged(cluster.get_widget(name) or {})]

    cluster.patch_widget("edited", {"spec": {"color": "green"}})  # generation 2, while nobody runs it
    # A reconcile period of 1000 h: the converged widgets are re-checked at a random time within it.
    second = start_operator([watch], "--reconcile-period=1000h", "--startup-resync=spread", name="second")
    cluster.create_widget("late", {"color": "red"})
    cluster.wait_condition("edited", "Successful", generation=2)
    cluster.wait_condition("late", "Successful", generation=1)
    # (a second run of "edited" at generation 2 is the echo of its own ConfigMap update, as in the SDK)
    assert {r["generation"] for r in second.runs("edited", "reconcile")} == {2}
    assert second.runs("late", "reconcile")
    # Not run at start-up, but for one: its run brings the dependent watches back (watchDependentResources)
    converged_ones = len(DONE) - len(unconverged)
    expected = sorted([1] * len(unconverged) + ([0] * (converged_ones - 1) + [1] if converged_ones else []))

    def counts() -> dict[str, int]:
        return {name: len(second.runs(name)) for name in DONE}

    try:  # the unconverged ones run as user changes, maybe still in flight now
        wait_for(lambda: sorted(counts().values()) == expected, 60)
    except AssertionError:
        pass  # said below, with what both operators did
    got = counts()
    assert sorted(got.values()) == expected, (
        f"runs on the second operator {got}; unconverged at its start {unconverged}; runs on the first"
        f" {({name: first.runs(name) for name in DONE})}\n--- first ---\n{first.logs()[-4000:]}"
        f"\n--- second ---\n{second.logs()[-6000:]}")
