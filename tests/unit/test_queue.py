"""WorkQueue / RateLimiter guarantees: serialization, coalescing, concurrency, backoff, timers, stop.

Assertions are on counts and order only; small real delays (backoff base 0.01 s) drive the timers and
``asyncio.wait_for`` bounds are safety nets against hangs, not timing assertions.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Callable

import pytest

from ansible_operator.queue import ObjectKey, RateLimiter, ReconcileOutcome, WorkQueue

A = ObjectKey("ns", "a")
B = ObjectKey("ns", "b")
C = ObjectKey("ns", "c")
SAFETY = 10.0  # seconds; only to turn a bug into a failure instead of a hang


class Recorder:
    """A reconcile function that records calls and can be gated and scripted per call."""

    def __init__(self, outcomes: Callable[[ObjectKey, int], ReconcileOutcome] | None = None,
                 gated: bool = False) -> None:
        self.calls: list[ObjectKey] = []
        self.running: Counter[ObjectKey] = Counter()
        self.max_running_per_key = 0
        self.max_running_total = 0
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.outcomes = outcomes or (lambda key, n: ReconcileOutcome())
        self.started = asyncio.Condition()
        self.cancelled: list[ObjectKey] = []

    async def __call__(self, key: ObjectKey) -> ReconcileOutcome:
        self.calls.append(key)
        n = self.calls.count(key)
        self.running[key] += 1
        self.max_running_per_key = max(self.max_running_per_key, self.running[key])
        self.max_running_total = max(self.max_running_total, sum(self.running.values()))
        async with self.started:
            self.started.notify_all()
        try:
            await self.gate.wait()
            return self.outcomes(key, n)
        except asyncio.CancelledError:
            self.cancelled.append(key)
            raise
        finally:
            self.running[key] -= 1

    async def wait_calls(self, n: int) -> None:
        async def _wait() -> None:
            async with self.started:
                await self.started.wait_for(lambda: len(self.calls) >= n)
        await asyncio.wait_for(_wait(), SAFETY)


async def idle(q: WorkQueue) -> None:
    await asyncio.wait_for(q.wait_idle(), SAFETY)


# ---------------------------------------------------------------------------------------- RateLimiter
def test_rate_limiter_exponential_capped_and_forget() -> None:
    rl = RateLimiter()
    delays = [rl.when(A) for _ in range(10)]
    assert delays == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert rl.failures(A) == 10
    assert rl.when(B) == 2  # per key
    rl.forget(A)
    assert rl.failures(A) == 0
    assert rl.when(A) == 2
    for _ in range(200):  # no overflow however long it keeps failing
        assert rl.when(C) <= 300


def test_rate_limiter_jitter_stays_within_fraction_and_cap() -> None:
    import random
    rl = RateLimiter(base=10, cap=35, jitter=0.2, rng=random.Random(7))
    first = rl.when(A)
    assert 8 <= first <= 12 and first != 10
    rl.when(A)
    assert rl.when(A) <= 35


@pytest.mark.parametrize("kwargs", [{"base": 0}, {"cap": -1}, {"jitter": 1.0}])
def test_rate_limiter_rejects_bad_settings(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RateLimiter(**kwargs)


def test_queue_rejects_bad_concurrency() -> None:
    with pytest.raises(ValueError, match="max_concurrent"):
        WorkQueue("w", Recorder(), max_concurrent=0)


# ---------------------------------------------------------------------------------------- WorkQueue
async def test_adds_during_a_run_coalesce_into_exactly_one_follow_up() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=4)
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    for _ in range(5):
        q.add(A)
    assert q.in_flight == 1 and q.depth == 0  # the dirty key is not queued while running
    rec.gate.set()
    await idle(q)
    assert rec.calls == [A, A]
    assert rec.max_running_per_key == 1
    await q.stop()


async def test_adds_while_queued_coalesce() -> None:
    rec = Recorder()
    q = WorkQueue("w", rec, max_concurrent=2)
    q.pause()
    await q.start()
    for _ in range(3):
        q.add(A)
    q.add(B)
    assert q.depth == 2 and rec.calls == []  # paused: collected, nothing started
    q.resume()
    await idle(q)
    assert sorted(rec.calls) == [A, B]
    await q.stop()


async def test_concurrency_limit_is_honoured_and_reached() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=3)
    await q.start()
    keys = [ObjectKey("ns", f"k{i}") for i in range(5)]
    for k in keys:
        q.add(k)
    await rec.wait_calls(3)
    await asyncio.sleep(0.05)  # give a 4th worker (if there were one) the chance to misbehave
    assert q.in_flight == 3 and q.depth == 2 and len(rec.calls) == 3
    rec.gate.set()
    await idle(q)
    assert sorted(rec.calls) == keys
    assert rec.max_running_total == 3
    await q.stop()


async def test_fifo_across_keys_and_dirty_key_goes_to_the_back() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    q.add(B)
    q.add(A)  # dirty: follow-up after B and C, which were added first
    q.add(C)
    q.add(B)  # coalesces with the queued B, keeps its place
    rec.gate.set()
    await idle(q)
    assert rec.calls == [A, B, C, A]
    await q.stop()


async def test_failure_backoff_grows_then_success_forgets() -> None:
    rl = RateLimiter(base=0.01, cap=1.0)
    seen: list[int] = []

    def outcomes(key: ObjectKey, n: int) -> ReconcileOutcome:
        seen.append(rl.failures(key))
        return ReconcileOutcome(failed=n <= 3)

    rec = Recorder(outcomes)
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    await rec.wait_calls(4)
    await idle(q)
    assert rec.calls == [A] * 4  # 3 failures, each retried, then success
    assert seen == [0, 1, 2, 3]  # failures kept counting across the retries
    assert rl.failures(A) == 0 and q.delayed == 0
    await q.stop()


async def test_backoff_delays_follow_the_rate_limiter() -> None:
    class Recording(RateLimiter):
        def __init__(self) -> None:
            super().__init__(base=0.01, cap=0.03)
            self.delays: list[float] = []

        def when(self, key):  # type: ignore[no-untyped-def]
            d = super().when(key)
            self.delays.append(d)
            return d

    rl = Recording()
    rec = Recorder(lambda key, n: ReconcileOutcome(failed=n <= 4))
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    await rec.wait_calls(5)
    await idle(q)
    assert rl.delays == [0.01, 0.02, 0.03, 0.03]
    await q.stop()


async def test_requeue_after_is_honoured_and_success_resets_backoff() -> None:
    rl = RateLimiter(base=0.01)
    script = {1: ReconcileOutcome(failed=True), 2: ReconcileOutcome(requeue_after=0.02),
              3: ReconcileOutcome()}
    rec = Recorder(lambda key, n: script[n])
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    await rec.wait_calls(3)
    await idle(q)
    assert rec.calls == [A, A, A]
    assert q.delayed == 0 and rl.failures(A) == 0
    await q.stop()


async def test_add_during_pending_backoff_runs_now_but_failures_keep_counting() -> None:
    rl = RateLimiter(base=30.0)  # the timer never fires within the test
    rec = Recorder(lambda key, n: ReconcileOutcome(failed=n <= 2))
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    await idle(q)
    assert rec.calls == [A] and q.delayed == 1 and rl.failures(A) == 1
    q.add(A)  # new information: run now instead of in 30 s
    assert q.delayed == 0
    await rec.wait_calls(2)
    await idle(q)
    assert rl.failures(A) == 2 and q.delayed == 1  # second failure → 60 s timer
    q.add(A)
    await rec.wait_calls(3)
    await idle(q)
    assert rl.failures(A) == 0 and q.delayed == 0  # success resets and schedules nothing
    assert rec.calls == [A, A, A]
    await q.stop()


async def test_add_after_keeps_the_soonest() -> None:
    rec = Recorder()
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add_after(A, 30.0)
    q.add_after(A, 0.01)  # sooner: replaces
    q.add_after(A, 60.0)  # later: ignored
    assert q.delayed == 1
    await rec.wait_calls(1)
    await idle(q)
    assert rec.calls == [A] and q.delayed == 0
    q.add_after(B, 0)  # non-positive delay = add now
    await rec.wait_calls(2)
    assert rec.calls == [A, B]
    await q.stop()


async def test_exception_is_treated_as_failure_and_queue_keeps_working(caplog) -> None:
    def outcomes(key: ObjectKey, n: int) -> ReconcileOutcome:
        if key == A and n == 1:
            raise RuntimeError("boom")
        return ReconcileOutcome()

    rl = RateLimiter(base=0.01)
    rec = Recorder(outcomes)
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    q.add(B)
    await rec.wait_calls(3)
    await idle(q)
    assert rec.calls == [A, B, A]  # A retried after its backoff, B unaffected
    assert "boom" in caplog.text and "ns/a" in caplog.text
    await q.stop()


async def test_non_outcome_return_is_treated_as_failure() -> None:
    results: list[object] = [None, ReconcileOutcome()]

    async def reconcile(key: ObjectKey) -> ReconcileOutcome:
        return results.pop(0)  # type: ignore[return-value]

    rl = RateLimiter(base=0.01)
    q = WorkQueue("w", reconcile, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)

    async def retried() -> None:  # only a retry (i.e. "failed") consumes the second result
        while results:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(retried(), SAFETY)
    await idle(q)
    assert rl.failures(A) == 0
    await q.stop()


async def test_forget_drops_queued_timers_backoff_and_follow_up() -> None:
    rec = Recorder(gated=True)
    rl = RateLimiter(base=30.0)
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=rl)
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    q.add(A)  # dirty
    q.add(B)  # queued
    q.add_after(C, 30.0)
    rl.when(C)
    q.forget(A)
    q.forget(B)
    q.forget(C)
    assert q.depth == 0 and q.delayed == 0 and rl.failures(C) == 0
    rec.gate.set()
    await idle(q)
    assert rec.calls == [A]  # the running one finished; no follow-up, nothing else ran
    assert q.delayed == 0


async def test_forget_while_running_then_failure_schedules_nothing() -> None:
    rec = Recorder(lambda key, n: ReconcileOutcome(failed=True), gated=True)
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=RateLimiter(base=30.0))
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    q.forget(A)
    rec.gate.set()
    await idle(q)
    assert q.delayed == 0 and q.rate_limiter.failures(A) == 0
    # ...but a new add after forget is new information and counts again
    rec.gate.clear()
    q.add(A)
    await rec.wait_calls(2)
    q.forget(A)
    q.add(A)
    rec.gate.set()
    await rec.wait_calls(3)
    await idle(q)
    await q.stop()


async def test_pause_collects_and_resume_runs() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=2)
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    q.pause()
    q.add(B)
    q.add(C)
    rec.gate.set()  # the running one finishes while paused
    await asyncio.sleep(0.05)
    assert rec.calls == [A] and q.depth == 2 and q.in_flight == 0
    q.resume()
    await idle(q)
    assert rec.calls == [A, B, C]
    await q.stop()


async def test_stop_cancels_running_and_leaves_no_tasks() -> None:
    before = asyncio.all_tasks()
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=2)
    await q.start()
    q.add(A)
    q.add(B)
    q.add_after(C, 30.0)
    await rec.wait_calls(2)
    await asyncio.wait_for(q.stop(), SAFETY)
    assert sorted(rec.cancelled) == [A, B]
    assert q.in_flight == 0 and q.delayed == 0
    assert asyncio.all_tasks() == before
    q.add(A)  # after stop: ignored, starts nothing
    q.add_after(A, 0.01)
    await asyncio.sleep(0.05)
    assert rec.calls == [A, B]
    with pytest.raises(RuntimeError):
        await q.start()


async def test_stop_without_cancel_waits_for_running() -> None:
    rec = Recorder(gated=True)
    q = WorkQueue("w", rec, max_concurrent=1)
    await q.start()
    q.add(A)
    q.add(B)
    await rec.wait_calls(1)
    stopper = asyncio.create_task(q.stop(cancel_running=False))
    await asyncio.sleep(0.02)
    assert not stopper.done()
    rec.gate.set()
    await asyncio.wait_for(stopper, SAFETY)
    assert rec.calls == [A] and rec.cancelled == []  # B never started


async def test_keys_added_before_start_run_after_start() -> None:
    rec = Recorder()
    q = WorkQueue("w", rec, max_concurrent=1)
    q.add(A)
    q.add(ObjectKey(None, "cluster-scoped"))
    await q.start()
    await idle(q)
    assert rec.calls == [A, ObjectKey(None, "cluster-scoped")]
    assert str(ObjectKey(None, "x")) == "x" and str(A) == "ns/a"
    await q.stop()


async def test_requeue_after_zero_runs_again_at_once() -> None:
    """What reconcile returns when the generation advanced during a run (issue 11 defect 2)."""
    script = {1: ReconcileOutcome(requeue_after=0.0), 2: ReconcileOutcome()}
    rec = Recorder(lambda key, n: script[n])
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=RateLimiter(base=30.0))
    await q.start()
    q.add(A)
    await rec.wait_calls(2)
    await idle(q)
    assert rec.calls == [A, A] and q.delayed == 0
    await q.stop()


async def test_object_replaced_while_running_gets_exactly_one_follow_up() -> None:
    """Intake forgets the old object and adds the new one (same name) while the old one's run goes on."""
    rec = Recorder(lambda key, n: ReconcileOutcome(failed=True) if n == 1 else ReconcileOutcome(), gated=True)
    q = WorkQueue("w", rec, max_concurrent=1, rate_limiter=RateLimiter(base=30.0))
    await q.start()
    q.add(A)
    await rec.wait_calls(1)
    q.forget(A)
    q.add(A)
    rec.gate.set()
    await rec.wait_calls(2)
    await idle(q)
    assert rec.calls == [A, A] and q.delayed == 0 and q.rate_limiter.failures(A) == 0
    await q.stop()
