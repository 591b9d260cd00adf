"""controller-runtime's metrics (``controller_runtime_*``, ``workqueue_*``) fed by a real WorkQueue: the
names, labels, buckets and the SDK's controller name that dashboards and alerts written for the SDK read.

A fake clock gives exact durations; the queue runs on the real event loop, with gates instead of sleeps.
"""

from __future__ import annotations

import asyncio

from ansible_operator.metrics import WORKQUEUE_BUCKETS, Metrics, controller_name
from ansible_operator.queue import ObjectKey, RateLimiter, ReconcileOutcome, WorkQueue

CONTROLLER = "memcached-v1alpha1-controller"
A = ObjectKey("ns", "a")
B = ObjectKey("ns", "b")
SAFETY = 10.0  # seconds; only to turn a bug into a failure instead of a hang


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def value(metrics: Metrics, sample: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(sample, labels)


def test_controller_name_and_zero_series_before_any_reconcile() -> None:
    assert controller_name("Memcached", "v1alpha1") == CONTROLLER
    metrics = Metrics()
    metrics.controller("Memcached", "v1alpha1", 3, group="cache.example.com")
    c = {"controller": CONTROLLER}
    q = {"name": CONTROLLER, "controller": CONTROLLER}
    for result in ("error", "requeue_after", "requeue", "success"):
        assert value(metrics, "controller_runtime_reconcile_total", result=result, **c) == 0
    assert value(metrics, "controller_runtime_reconcile_errors_total", **c) == 0
    assert value(metrics, "controller_runtime_terminal_reconcile_errors_total", **c) == 0
    assert value(metrics, "controller_runtime_reconcile_panics_total", **c) == 0
    assert value(metrics, "controller_runtime_max_concurrent_reconciles", **c) == 3
    assert value(metrics, "controller_runtime_active_workers", **c) == 0
    assert value(metrics, "workqueue_depth", **q) == 0
    assert value(metrics, "workqueue_adds_total", **q) == 0
    assert value(metrics, "workqueue_retries_total", **q) == 0
    assert value(metrics, "workqueue_unfinished_work_seconds", **q) == 0
    assert value(metrics, "workqueue_longest_running_processor_seconds", **q) == 0
    text = metrics.exposition().decode()
    # Go's ExponentialBuckets(10e-9, 10, 12) as client_golang prints them
    assert len(WORKQUEUE_BUCKETS) == 12 and WORKQUEUE_BUCKETS[-1] == 1000
    labels = f'controller="{CONTROLLER}",le="1e-08",name="{CONTROLLER}"'
    assert f"workqueue_queue_duration_seconds_bucket{{{labels}}} 0\n" in text
    assert 'le="9.999999999999999e-06"' in text
    labels = f'controller="{CONTROLLER}",le="0.15"'
    assert f"controller_runtime_reconcile_time_seconds_bucket{{{labels}}} 0\n" in text
    # a second watch of the same kind and version (another group) does not share the first one's series
    assert metrics.controller("Memcached", "v1alpha1", 1, group="other.io").name \
        == "memcached-v1alpha1-other.io-controller"


async def test_results_durations_adds_retries_depth_and_workers() -> None:
    clock = Clock()
    metrics = Metrics()
    hooks = metrics.controller("Memcached", "v1alpha1", 2, clock=clock)
    gates: dict[ObjectKey, asyncio.Event] = {A: asyncio.Event(), B: asyncio.Event()}
    started: list[ObjectKey] = []
    outcomes = {A: [ReconcileOutcome(requeue_after=36000.0), ReconcileOutcome(failed=True)],
                B: [ReconcileOutcome()]}
    raised = asyncio.Event()

    async def reconcile(key: ObjectKey) -> ReconcileOutcome:
        started.append(key)
        await gates[key].wait()
        gates[key].clear()
        if not outcomes[key]:
            raised.set()
            raise RuntimeError("reconcile bug")
        return outcomes[key].pop(0)

    queue = WorkQueue("Memcached.cache.example.com", reconcile, max_concurrent=2, clock=clock, hooks=hooks,
                      rate_limiter=RateLimiter(base=3600))
    c = {"controller": CONTROLLER}
    q = {"name": CONTROLLER, "controller": CONTROLLER}
    queue.add(A)
    queue.add(A)  # coalesces: one add
    assert value(metrics, "workqueue_adds_total", **q) == 1
    assert value(metrics, "workqueue_depth", **q) == 1
    clock.now += 0.5  # A waits 0.5 s in the queue
    await queue.start()
    try:
        await asyncio.wait_for(_until(lambda: started == [A]), SAFETY)
        assert value(metrics, "workqueue_depth", **q) == 0
        assert value(metrics, "controller_runtime_active_workers", **c) == 1
        assert value(metrics, "workqueue_queue_duration_seconds_sum", **q) == 0.5
        queue.add(A)  # while running: marked dirty, counted once
        queue.add(A)
        assert value(metrics, "workqueue_adds_total", **q) == 2
        assert value(metrics, "workqueue_depth", **q) == 1
        queue.add(B)
        await asyncio.wait_for(_until(lambda: started == [A, B]), SAFETY)
        clock.now += 2.0
        assert value(metrics, "workqueue_longest_running_processor_seconds", **q) == 2.0
        assert value(metrics, "workqueue_unfinished_work_seconds", **q) == 4.0  # A 2 s + B 2 s

        gates[B].set()  # B: success
        await asyncio.wait_for(_until(lambda: value(metrics, "controller_runtime_reconcile_total",
                                                    result="success", **c) == 1), SAFETY)
        gates[A].set()  # A: requeue after the reconcile period, then its dirty follow-up runs at once
        await asyncio.wait_for(_until(lambda: started == [A, B, A]), SAFETY)
        assert value(metrics, "controller_runtime_reconcile_total", result="requeue_after", **c) == 1
        assert value(metrics, "workqueue_retries_total", **q) == 0  # dirty: run again now, no timer
        assert value(metrics, "workqueue_adds_total", **q) == 3  # A, A (dirty), B: the follow-up is not new
        assert value(metrics, "controller_runtime_reconcile_time_seconds_count", **c) == 2
        assert value(metrics, "workqueue_work_duration_seconds_sum", **q) == 4.0

        gates[A].set()  # A's follow-up fails: error, and a backoff retry
        await asyncio.wait_for(_until(lambda: value(metrics, "controller_runtime_reconcile_errors_total",
                                                    **c) == 1), SAFETY)
        assert value(metrics, "controller_runtime_reconcile_total", result="error", **c) == 1
        assert value(metrics, "workqueue_retries_total", **q) == 1  # the backoff (client-go's AddAfter)
        assert value(metrics, "controller_runtime_reconcile_panics_total", **c) == 0

        queue.add(A)  # runs now (drops the backoff timer) and raises
        gates[A].set()
        await asyncio.wait_for(raised.wait(), SAFETY)
        await asyncio.wait_for(_until(lambda: value(metrics, "controller_runtime_reconcile_panics_total",
                                                    **c) == 1), SAFETY)
        assert value(metrics, "controller_runtime_reconcile_total", result="error", **c) == 2
        assert value(metrics, "controller_runtime_reconcile_errors_total", **c) == 2
        assert value(metrics, "controller_runtime_active_workers", **c) == 0
        assert value(metrics, "workqueue_depth", **q) == 0
        assert value(metrics, "workqueue_longest_running_processor_seconds", **q) == 0
    finally:
        await queue.stop()


async def test_delayed_adds_are_retries_and_forgetting_a_queued_key_leaves_the_depth() -> None:
    metrics = Metrics()
    hooks = metrics.controller("Memcached", "v1alpha1", 1)
    queue = WorkQueue("w", _never_called, max_concurrent=1, hooks=hooks)
    queue.pause()
    queue.add_after(A, 3600)
    assert value(metrics, "workqueue_retries_total", name=CONTROLLER, controller=CONTROLLER) == 1
    assert value(metrics, "workqueue_depth", name=CONTROLLER, controller=CONTROLLER) == 0
    queue.add(A)
    queue.add(B)
    assert value(metrics, "workqueue_depth", name=CONTROLLER, controller=CONTROLLER) == 2
    queue.forget(A)
    assert value(metrics, "workqueue_depth", name=CONTROLLER, controller=CONTROLLER) == 1
    await queue.stop()


async def _never_called(key: ObjectKey) -> ReconcileOutcome:
    raise AssertionError(f"{key} should not run while paused")


async def _until(check: object) -> None:
    assert callable(check)
    while not check():
        await asyncio.sleep(0)


def test_leader_election_master_status_and_process_metrics() -> None:
    metrics = Metrics()
    assert value(metrics, "leader_election_master_status", name="memcached-operator-lock") is None
    metrics.set_leader(False, lease="memcached-operator-lock")  # a stand-by
    assert value(metrics, "leader_election_master_status", name="memcached-operator-lock") == 0
    metrics.set_leader(True, lease="memcached-operator-lock")
    assert value(metrics, "leader_election_master_status", name="memcached-operator-lock") == 1
    assert value(metrics, "ansible_operator_leader") == 1
    assert (value(metrics, "process_resident_memory_bytes") or 0) > 0
    assert (value(metrics, "process_start_time_seconds") or 0) > 0
