"""WorkQueue fairness (issue 24): user changes before background work, no starvation, resync jitter, and
the start-up decision (spread converged objects over their reconcile period, run the rest at once).

Pure logic: one worker, a reconcile that only records, assertions on order and counts.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, cast

import pytest
from test_intake import RecordingQueue
from test_queue import Recorder, idle

from ansible_operator.intake import WatchIntake, startup_delay
from ansible_operator.kubetypes import KubeObject
from ansible_operator.queue import ObjectKey, Priority, ReconcileOutcome, WorkQueue, resync_delay
from ansible_operator.status import converged
from ansible_operator.watches import Finalizer, Watch

USER, BACKGROUND = Priority.USER, Priority.BACKGROUND


def key(i: int | str) -> ObjectKey:
    return ObjectKey("ns", str(i))


async def queued_then_run(q: WorkQueue, rec: Recorder, adds: list[tuple[ObjectKey, Priority]]) -> None:
    """Hold the one worker on a first key, queue ``adds``, then let everything run."""
    q.add(key("first"))
    await rec.wait_calls(1)
    for k, p in adds:
        q.add(k, p)
    rec.gate.set()
    await idle(q)


async def test_a_user_key_overtakes_a_thousand_background_keys() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    new = key("new")
    await queued_then_run(q, rec, [(key(i), BACKGROUND) for i in range(1000)] + [(new, USER)])
    assert rec.calls[1] == new  # next after the one running when it arrived
    assert rec.calls[2:] == [key(i) for i in range(1000)]  # background keeps its FIFO order
    await q.stop()


def in_ns(ns: str | None, name: str) -> ObjectKey:
    return ObjectKey(ns, name)


async def test_a_burst_in_one_namespace_does_not_hold_up_another_namespace() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    storm = [(in_ns("bulk", f"s{i}"), USER) for i in range(1000)]
    mine = in_ns("team", "mine")
    await queued_then_run(q, rec, [*storm, (mine, USER)])
    assert rec.calls[1:4] == [in_ns("bulk", "s0"), mine, in_ns("bulk", "s1")]  # the namespaces take turns
    assert rec.calls[3:] == [k for k, _ in storm[1:]]  # each namespace keeps its own FIFO order
    await q.stop()


async def test_namespaces_take_turns_in_both_lines_and_cluster_scoped_keys_are_one_namespace() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1, fairness=100)
    await q.start()
    adds = [(in_ns("a", "a1"), USER), (in_ns("a", "a2"), USER), (in_ns(None, "c1"), USER),
            (in_ns(None, "c2"), USER), (in_ns("b", "b1"), USER),
            (in_ns("a", "ra"), BACKGROUND), (in_ns("a", "ra2"), BACKGROUND), (in_ns("b", "rb"), BACKGROUND)]
    await queued_then_run(q, rec, adds)
    assert [str(k) for k in rec.calls[1:]] == ["a/a1", "c1", "b/b1", "a/a2", "c2", "a/ra", "b/rb", "a/ra2"]
    await q.stop()


async def test_stale_entries_never_give_a_namespace_an_extra_turn_or_a_lost_one() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(key("first"))
    await rec.wait_calls(1)
    for name in ("a1", "a2", "a3"):
        q.add(in_ns("a", name), BACKGROUND)
    q.add(in_ns("b", "b1"), USER)
    q.add(in_ns("a", "a1"), USER)  # upgraded: its background entry goes stale
    q.forget(in_ns("a", "a2"))
    q.forget(in_ns("b", "b1"))     # b has no live key left: skipped
    q.add(in_ns("c", "c1"), USER)
    q.add(in_ns("b", "b2"), USER)  # b again, in the turn it still had
    assert (q.waiting(USER), q.waiting(BACKGROUND)) == (3, 1)
    rec.gate.set()
    await idle(q)
    assert [str(k) for k in rec.calls[1:]] == ["b/b2", "a/a1", "c/c1", "a/a3"]
    await q.stop()


async def test_depth_counts_both_lines() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(key("first"))
    await rec.wait_calls(1)
    q.add(key(1), BACKGROUND)
    q.add(key(2), BACKGROUND)
    q.add(key(3), USER)
    assert (q.depth, q.waiting(USER), q.waiting(BACKGROUND)) == (3, 1, 2)
    q.add(key(1), USER)  # an upgrade: still one entry
    assert (q.depth, q.waiting(USER), q.waiting(BACKGROUND)) == (3, 2, 1)
    q.forget(key(2))
    assert (q.depth, q.waiting(USER), q.waiting(BACKGROUND)) == (2, 2, 0)
    rec.gate.set()
    await idle(q)
    assert q.depth == 0 and rec.calls == [key("first"), key(3), key(1)]
    await q.stop()


async def test_a_user_add_upgrades_a_queued_background_key() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    adds = [(key(i), BACKGROUND) for i in range(5)] + [(key(3), USER), (key(3), BACKGROUND)]
    await queued_then_run(q, rec, adds)
    # key 3 moved to the user line (a later background add does not move it back) and ran once
    assert rec.calls == [key("first"), key(3), key(0), key(1), key(2), key(4)]
    await q.stop()


async def test_background_keys_are_not_starved_by_a_stream_of_user_keys() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1, fairness=3)
    await q.start()
    users = [(key(f"u{i}"), USER) for i in range(9)]
    backgrounds = [(key(f"b{i}"), BACKGROUND) for i in range(3)]
    await queued_then_run(q, rec, backgrounds + users)
    names = [k.name for k in rec.calls[1:]]
    assert names == ["u0", "u1", "u2", "b0", "u3", "u4", "u5", "b1", "u6", "u7", "u8", "b2"]
    await q.stop()


async def test_a_user_streak_only_counts_while_background_keys_wait() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1, fairness=2)
    await q.start()
    # five user keys with nothing in the background: no streak builds up
    await queued_then_run(q, rec, [(key(f"u{i}"), USER) for i in range(5)])
    rec.gate.clear()
    q.add(key("hold"))
    await rec.wait_calls(7)
    q.add(key("b"), BACKGROUND)
    q.add(key("v0"))
    q.add(key("v1"))
    q.add(key("v2"))
    rec.gate.set()
    await idle(q)
    assert [k.name for k in rec.calls[7:]] == ["v0", "v1", "b", "v2"]
    await q.stop()


async def test_a_dirty_follow_up_keeps_the_highest_priority_of_its_adds() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(key("a"))
    await rec.wait_calls(1)
    q.add(key("b"), BACKGROUND)
    q.add(key("a"), BACKGROUND)  # dirty, background...
    q.add(key("a"), USER)         # ...then a user change: the follow-up goes first
    rec.gate.set()
    await idle(q)
    assert [k.name for k in rec.calls] == ["a", "a", "b"]
    await q.stop()


async def test_timers_fire_as_background_unless_scheduled_as_user() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(key("first"))
    await rec.wait_calls(1)
    q.add_after(key("resync"), 0.01)
    q.add_after(key("urgent"), 0.02, USER)
    await asyncio.sleep(0.1)  # both fired into their lines while the worker is held
    assert (q.waiting(USER), q.waiting(BACKGROUND)) == (1, 1)
    rec.gate.set()
    await idle(q)
    assert [k.name for k in rec.calls] == ["first", "urgent", "resync"]
    await q.stop()


async def test_a_requeue_outcome_goes_to_its_priority_line() -> None:
    def outcomes(k: ObjectKey, n: int) -> ReconcileOutcome:
        if k.name == "newer-gen" and n == 1:
            return ReconcileOutcome(requeue_after=0.0, priority=USER)
        if k.name == "resync" and n == 1:
            return ReconcileOutcome(requeue_after=0.0, resync=True)
        return ReconcileOutcome()

    rec = Recorder(outcomes, gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(key("resync"))
    await rec.wait_calls(1)
    q.add(key("b"), BACKGROUND)
    q.add(key("newer-gen"))
    rec.gate.set()
    await idle(q)
    # resync requeues as background (after b); newer-gen's own follow-up goes ahead of both
    assert [k.name for k in rec.calls] == ["resync", "newer-gen", "newer-gen", "b", "resync"]
    await q.stop()


# ---------------------------------------------------------------------------------------- jitter
def test_resync_jitter_stays_within_the_period_plus_ten_percent() -> None:
    rng = random.Random(42)
    delays = [resync_delay(100.0, 0.1, rng) for _ in range(1000)]
    assert all(100.0 <= d <= 110.0 for d in delays)
    assert max(delays) - min(delays) > 9.0  # really spread, not a constant offset
    assert len({round(d, 3) for d in delays}) > 900
    assert resync_delay(100.0, 0.0, rng) == 100.0
    assert resync_delay(0.0, 0.1, rng) == 0.0


async def test_the_queue_jitters_resyncs_but_not_role_requested_requeues() -> None:
    due: dict[str, float] = {}

    def outcomes(k: ObjectKey, n: int) -> ReconcileOutcome:
        return ReconcileOutcome(requeue_after=1000.0, resync=k.name == "resync")

    rec = Recorder(outcomes)
    q = WorkQueue("w", rec, max_concurrent=1, rng=random.Random(1), clock=lambda: 0.0)
    await q.start()
    q.add(key("resync"))
    q.add(key("asked"))
    await idle(q)
    due = {k.name: when for k, (when, _, _) in q._timers.items()}
    assert due["asked"] == 1000.0
    assert 1000.0 < due["resync"] <= 1100.0
    await q.stop()


@pytest.mark.parametrize("kwargs", [{"fairness": 0}, {"resync_jitter": -0.1}, {"resync_jitter": 1.5}])
def test_queue_rejects_bad_fairness_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        WorkQueue("w", Recorder(), max_concurrent=1, **kwargs)


# ---------------------------------------------------------------------------------------- start-up
FINALIZER = "cache.example.com/finalizer"


def make_watch(**kw: Any) -> Watch:
    base: dict[str, Any] = dict(group="cache.example.com", version="v1alpha1", kind="Memcached",
                                role=str(Path("/tmp/role")), playbook=None, vars={}, finalizer=None,
                                reconcile_period=600.0)
    base.update(kw)
    return Watch(**base)


def obj(generation: int = 2, conditions: list[dict[str, Any]] | None = None, *, status_gen: int | None = None,
        name: str = "a", **meta: Any) -> KubeObject:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": generation}
    metadata.update(meta)
    body: dict[str, Any] = {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                            "metadata": metadata, "spec": {}}
    if conditions is not None:
        body["status"] = {"conditions": conditions}
        if status_gen is not None:
            body["status"]["observedGeneration"] = status_gen
    return cast(KubeObject, body)


def cond(ctype: str, status: str, gen: int | None = 2, reason: str = "Successful") -> dict[str, Any]:
    c: dict[str, Any] = {"type": ctype, "status": status, "reason": reason}
    if gen is not None:
        c["observedGeneration"] = gen
    return c


OURS_DONE = [cond("Running", "False"), cond("Successful", "True"), cond("Failure", "False")]
SDK_DONE = [cond("Running", "True"), cond("Successful", "True"), cond("Failure", "False", reason="")]


@pytest.mark.parametrize("body, expected", [
    (obj(2, OURS_DONE), True),
    (obj(2, SDK_DONE), True),  # --sdk-conditions: Running stays True (reason Successful) after a success
    (obj(2, [cond("Successful", "True", gen=None)], status_gen=2), True),  # status.observedGeneration
    (obj(3, OURS_DONE), False),  # a generation not yet applied
    (obj(2, [cond("Running", "True", reason="Running"), cond("Successful", "True")]), False),  # killed
    (obj(2, [cond("Running", "True", reason="Running"), cond("Successful", "False")]), False),  # SDK style
    (obj(2, [cond("Successful", "False", reason="Failed"), cond("Failure", "True", reason="Failed")]), False),
    (obj(2, [cond("Successful", "True", gen=None)]), False),  # no observedGeneration: who knows
    (obj(2, None), False),  # never ran
    (obj(2, OURS_DONE, deletionTimestamp="2026-01-01T00:00:00Z"), False),
])
def test_converged(body: dict[str, Any], expected: bool) -> None:
    assert converged(body) is expected


def test_startup_delay_spreads_converged_objects_uniformly_over_the_period() -> None:
    rng = random.Random(3)
    w = make_watch()
    delays = [startup_delay(w, obj(2, OURS_DONE), mode="spread", rng=rng) for _ in range(2000)]
    assert all(d is not None and 0.0 <= d <= 600.0 for d in delays)
    buckets = [0] * 6
    for d in delays:
        assert d is not None
        buckets[min(5, int(d // 100))] += 1
    assert all(250 <= b <= 420 for b in buckets), buckets  # ~333 each


def test_startup_delay_runs_unconverged_or_immediate_at_once_as_user_changes() -> None:
    rng = random.Random(3)
    w = make_watch()
    assert startup_delay(w, obj(3, OURS_DONE), mode="spread", rng=rng) is None
    assert startup_delay(w, obj(2, None), mode="spread", rng=rng) is None
    assert startup_delay(w, obj(2, OURS_DONE), mode="immediate", rng=rng) is None
    with_finalizer = make_watch(finalizer=Finalizer(name=FINALIZER, role=None, playbook=None, vars={}))
    assert startup_delay(with_finalizer, obj(2, OURS_DONE), mode="spread", rng=rng) is None  # not added yet
    converged_with = obj(2, OURS_DONE, finalizers=[FINALIZER])
    assert startup_delay(with_finalizer, converged_with, mode="spread", rng=rng) is not None


def test_startup_delay_follows_the_reconcile_period_annotation_and_without_a_period_is_zero() -> None:
    rng = random.Random(5)
    annotated = obj(2, OURS_DONE, annotations={"ansible.sdk.operatorframework.io/reconcile-period": "10s"})
    for _ in range(100):
        d = startup_delay(make_watch(), annotated, mode="spread", rng=rng)
        assert d is not None and 0.0 <= d <= 10.0
    assert startup_delay(make_watch(reconcile_period=None), obj(2, OURS_DONE), mode="spread", rng=rng) == 0.0


def test_intake_spreads_converged_objects_only_in_the_start_up_listing() -> None:
    queue = RecordingQueue()
    intake = WatchIntake(make_watch(watch_dependent_resources=False), queue,  # type: ignore[arg-type]
                         startup_resync="spread", rng=random.Random(9))
    intake.handle(None, obj(2, OURS_DONE, name="done"))
    intake.handle(None, obj(2, None, name="fresh"))
    intake.handle("ADDED", obj(2, OURS_DONE, name="restored"))  # not in the listing: a new object
    assert queue.added == [key("fresh"), key("restored")] and queue.priorities == [USER, USER]
    assert [(k, p) for k, _, p in queue.delayed] == [(key("done"), BACKGROUND)]
    assert 0.0 <= queue.delayed[0][1] <= 600.0
    intake.handle("MODIFIED", obj(3, OURS_DONE, name="done"))  # a new generation: a user change, now
    assert queue.added[-1] == key("done") and queue.priorities[-1] == USER


def test_intake_without_a_period_queues_converged_objects_as_background() -> None:
    queue = RecordingQueue()
    intake = WatchIntake(make_watch(reconcile_period=None), queue,  # type: ignore[arg-type]
                         startup_resync="spread")
    intake.handle(None, obj(2, OURS_DONE, name="done"))
    assert queue.added == [key("done")] and queue.priorities == [BACKGROUND] and not queue.delayed


def test_intake_immediate_runs_everything_at_start_up() -> None:
    queue = RecordingQueue()
    intake = WatchIntake(make_watch(), queue, startup_resync="immediate")  # type: ignore[arg-type]
    intake.handle(None, obj(2, OURS_DONE, name="done"))
    assert queue.added == [key("done")] and queue.priorities == [USER] and not queue.delayed
    with pytest.raises(ValueError, match="startup_resync"):
        WatchIntake(make_watch(), queue, startup_resync="later")  # type: ignore[arg-type]


def test_intake_runs_one_converged_object_at_once_to_bring_dependent_watches_back() -> None:
    queue = RecordingQueue()
    intake = WatchIntake(make_watch(watch_dependent_resources=True), queue,  # type: ignore[arg-type]
                         startup_resync="spread")
    for i in range(3):
        intake.handle(None, obj(2, OURS_DONE, name=f"done{i}"))
    assert queue.added == [key("done0")] and queue.priorities == [BACKGROUND]
    assert [k for k, _, _ in queue.delayed] == [key("done1"), key("done2")]


def test_intake_background_default_queues_converged_objects_at_once_behind_user_changes() -> None:
    queue = RecordingQueue()
    intake = WatchIntake(make_watch(), queue)  # type: ignore[arg-type]
    assert intake.startup_resync == "background"
    intake.handle(None, obj(2, OURS_DONE, name="done"))
    intake.handle(None, obj(2, None, name="fresh"))
    assert queue.added == [key("done"), key("fresh")] and queue.priorities == [BACKGROUND, USER]
    assert not queue.delayed
