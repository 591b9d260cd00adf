"""Per-watch work queue: controller-runtime's workqueue + controller loop, in asyncio.

Why a queue between kopf and the runs: Kubernetes delivers many events per object (spec edits, our own
status writes, dependent-resource changes, resync timers). Running one playbook per event would run the
same object concurrently and waste runs on stale state. Like controller-runtime we therefore turn events
into *keys* and guarantee:

* at most one reconcile per key at a time;
* adds while a key is queued coalesce (no-op); adds while it runs mark it *dirty*, which yields exactly
  one follow-up run after the current one, however many adds arrived;
* at most ``max_concurrent`` reconciles per queue (one queue per watch), FIFO across keys;
* a failed reconcile (or one that raised) is retried after a per-key exponential backoff
  (:class:`RateLimiter`); a success resets the backoff; ``requeue_after`` schedules a later run
  (periodic resync, role-requested requeue);
* a new event (:meth:`WorkQueue.add`) while a backoff/resync timer is pending runs the key now and drops
  the timer: the run's own outcome decides what comes next. The failure count keeps growing until a
  success, so a persistently failing object still backs off;
* :meth:`WorkQueue.pause` (leader election lost / not yet won) keeps collecting keys but starts nothing.

Metrics are not kept here: the queue calls a :class:`QueueHooks` (``metrics.ControllerMetrics`` exports
controller-runtime's ``workqueue_*`` and ``controller_runtime_*`` series from these calls) at the points
where client-go's workqueue and controller-runtime's controller record theirs.

Everything here runs on the event-loop thread; no locks are needed because nothing awaits between a
check and the state change that depends on it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Hashable, Protocol

log = logging.getLogger(__name__)

__all__ = ["ObjectKey", "QueueHooks", "ReconcileOutcome", "RateLimiter", "WorkQueue"]


@dataclass(frozen=True, order=True)
class ObjectKey:
    """Identity of one watched object. One queue per watch, so the GVK is implied by the queue."""

    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class ReconcileOutcome:
    """What a reconcile tells the queue about the key's future."""

    failed: bool = False
    """Retry after the key's exponential backoff; wins over ``requeue_after``."""
    requeue_after: float | None = None
    """Run again after this many seconds (resync, role-requested requeue). Ignored when ``failed``."""


class QueueHooks(Protocol):
    """What a :class:`WorkQueue` reports, at the points client-go's workqueue and controller-runtime's
    controller record their metrics."""

    def added(self, key: ObjectKey) -> None:
        """A key entered the queue (not when it coalesced with a queued or already-dirty one)."""

    def dropped(self, key: ObjectKey) -> None:
        """A queued (or dirty) key left without being run: the object is gone."""

    def retried(self, key: ObjectKey) -> None:
        """A delayed add (backoff, ``requeue_after``, ``add_after``): client-go's ``AddAfter``."""

    def started(self, key: ObjectKey) -> None:
        """A worker took the key and its reconcile begins."""

    def finished(self, key: ObjectKey, outcome: ReconcileOutcome | None, raised: bool) -> None:
        """The reconcile ended: its outcome (None when cancelled), ``raised`` when it raised."""


class _NoHooks:
    def added(self, key: ObjectKey) -> None:
        pass

    def dropped(self, key: ObjectKey) -> None:
        pass

    def retried(self, key: ObjectKey) -> None:
        pass

    def started(self, key: ObjectKey) -> None:
        pass

    def finished(self, key: ObjectKey, outcome: ReconcileOutcome | None, raised: bool) -> None:
        pass


class RateLimiter:
    """Per-key exponential backoff: ``base * 2**failures`` seconds, capped at ``cap``.

    Same shape as controller-runtime's ``ItemExponentialFailureRateLimiter`` but starting at seconds: an
    Ansible run costs seconds, so retrying after 5 ms would only hammer the API server.
    ``jitter`` (a fraction, e.g. 0.1 = ±10 %) spreads retries of many objects that failed together; it is
    off by default so delays are exact and testable.
    """

    def __init__(self, base: float = 2.0, cap: float = 300.0, *, jitter: float = 0.0,
                 rng: random.Random | None = None) -> None:
        if base <= 0 or cap <= 0:
            raise ValueError(f"RateLimiter base and cap must be > 0 (got base={base}, cap={cap})")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"RateLimiter jitter must be in [0, 1) (got {jitter})")
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return how long to wait before retrying it."""
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        # Past 2**64 the float math is pointless (and could overflow): the cap has long been reached.
        delay = self.cap if exp >= 64 else min(self.cap, self.base * (2.0 ** exp))
        if self.jitter:
            delay = min(self.cap, delay * self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter))
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset ``key`` after a success (or when the object is gone)."""
        self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


ReconcileFn = Callable[[ObjectKey], Awaitable[ReconcileOutcome]]


class WorkQueue:
    """Serializes, coalesces, rate-limits and parallelizes reconciles of one watch's objects."""

    def __init__(self, name: str, reconcile: ReconcileFn, *, max_concurrent: int,
                 rate_limiter: RateLimiter | None = None,
                 clock: Callable[[], float] = time.monotonic, hooks: QueueHooks | None = None) -> None:
        if max_concurrent < 1:
            raise ValueError(f"work queue {name!r}: max_concurrent must be >= 1 (got {max_concurrent})")
        self.name = name
        self.max_concurrent = max_concurrent
        self.rate_limiter = rate_limiter or RateLimiter()
        self._reconcile = reconcile
        self._clock = clock
        self._hooks: QueueHooks = hooks if hooks is not None else _NoHooks()

        self._queue: deque[ObjectKey] = deque()   # FIFO of keys ready to run
        self._queued: set[ObjectKey] = set()      # mirror of _queue for O(1) coalescing
        self._running: set[ObjectKey] = set()
        self._dirty: set[ObjectKey] = set()       # added while running → one follow-up run
        self._forgotten: set[ObjectKey] = set()   # forgotten while running → no follow-up, no timer
        self._timers: dict[ObjectKey, tuple[float, asyncio.TimerHandle]] = {}  # key → (due, handle)

        self._waiters: list[asyncio.Future[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._paused = False
        self._stopping = False

    # ------------------------------------------------------------------ metrics-facing properties
    @property
    def depth(self) -> int:
        """Keys ready to run but not yet started (delayed ones not counted)."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Reconciles running right now."""
        return len(self._running)

    @property
    def delayed(self) -> int:
        """Keys waiting on a backoff / requeue timer."""
        return len(self._timers)

    @property
    def paused(self) -> bool:
        return self._paused

    def is_running(self, key: ObjectKey) -> bool:
        return key in self._running

    # ------------------------------------------------------------------ producers
    def add(self, key: ObjectKey) -> None:
        """Enqueue ``key`` now. Coalesces with a queued one; marks a running one dirty.

        A pending delayed add for ``key`` is dropped: running now subsumes it, and this run's outcome
        decides the next backoff/requeue. The backoff failure count is *not* reset.
        """
        if self._stopping:
            log.debug("work queue %s stopped; ignoring add of %s", self.name, key)
            return
        self._forgotten.discard(key)
        self._cancel_timer(key)
        self._add_now(key)

    def add_after(self, key: ObjectKey, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; the soonest of several pending delayed adds wins."""
        if self._stopping:
            log.debug("work queue %s stopped; ignoring delayed add of %s", self.name, key)
            return
        self._forgotten.discard(key)
        self._schedule(key, delay)

    def forget(self, key: ObjectKey) -> None:
        """The object is gone: cancel its timers, reset backoff, drop it from the queue.

        A running reconcile is left to finish, but gets no follow-up run and schedules no timer, unless a
        new add arrives for the key after this call.
        """
        self._cancel_timer(key)
        self.rate_limiter.forget(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self._hooks.dropped(key)
        if key in self._queued:
            self._queued.discard(key)
            self._queue.remove(key)
            self._hooks.dropped(key)
        if key in self._running:
            self._forgotten.add(key)
        self._notify()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Spawn ``max_concurrent`` workers. Keys added before start are run then."""
        if self._workers:
            raise RuntimeError(f"work queue {self.name!r} already started")
        if self._stopping:
            raise RuntimeError(f"work queue {self.name!r} was stopped; create a new one")
        self._workers = [
            asyncio.create_task(self._worker(), name=f"workqueue:{self.name}:{i}")
            for i in range(self.max_concurrent)
        ]

    async def stop(self, *, cancel_running: bool = True) -> None:
        """Stop the workers and drop all timers; leaves no tasks behind.

        ``cancel_running=True`` cancels running reconciles (which cancels their runs); otherwise waits
        for them to finish. Either way no new reconcile starts and no timer is scheduled afterwards.
        """
        self._stopping = True
        for key in list(self._timers):
            self._cancel_timer(key)
        workers, self._workers = self._workers, []
        if cancel_running:
            for task in workers:
                task.cancel()
        self._notify()
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)

    def pause(self) -> None:
        """Keep collecting keys (and firing timers into the queue), start no new reconciles."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._notify()

    async def wait_idle(self) -> None:
        """Return when nothing is queued, running or due; timers due later may still be pending.

        Meant for tests. Never returns while paused with keys queued.
        """
        while self._queue or self._running or self._has_due_timer():
            await self._wait_change()

    # ------------------------------------------------------------------ internals
    def _add_now(self, key: ObjectKey) -> None:
        if key in self._running:
            if key not in self._dirty:
                self._dirty.add(key)
                self._hooks.added(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._hooks.added(key)
        self._notify()

    def _requeue_dirty(self, key: ObjectKey) -> None:
        """The follow-up run of a key marked dirty while it ran (already counted as added)."""
        self._dirty.discard(key)
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)

    def _schedule(self, key: ObjectKey, delay: float) -> None:
        if self._stopping:
            return
        self._hooks.retried(key)
        if delay <= 0:
            self._cancel_timer(key)
            self._add_now(key)
            return
        due = self._clock() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return  # the earlier one wins
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._timers[key] = (due, handle)

    def _fire(self, key: ObjectKey) -> None:
        self._timers.pop(key, None)
        if not self._stopping:
            self._add_now(key)
        self._notify()

    def _cancel_timer(self, key: ObjectKey) -> None:
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()

    def _has_due_timer(self) -> bool:
        now = self._clock()
        return any(due <= now for due, _ in self._timers.values())

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _wait_change(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    async def _next_key(self) -> ObjectKey | None:
        while not self._stopping:
            if not self._paused and self._queue:
                key = self._queue.popleft()
                self._queued.discard(key)
                return key
            await self._wait_change()
        return None

    async def _worker(self) -> None:
        while True:
            key = await self._next_key()
            if key is None:
                return
            self._running.add(key)
            self._hooks.started(key)
            try:
                outcome = await self._call(key)
            except asyncio.CancelledError:
                self._running.discard(key)
                self._dirty.discard(key)
                self._hooks.finished(key, None, False)
                self._notify()
                raise
            self._finish(key, outcome)

    async def _call(self, key: ObjectKey) -> ReconcileOutcome:
        try:
            outcome = await self._reconcile(key)
        except Exception:
            log.exception("work queue %s: reconcile of %s raised; treating it as failed", self.name, key)
            outcome = ReconcileOutcome(failed=True)
            self._hooks.finished(key, outcome, True)
            return outcome
        if not isinstance(outcome, ReconcileOutcome):
            log.error("work queue %s: reconcile of %s returned %r, not a ReconcileOutcome; treating it as "
                      "failed", self.name, key, outcome)
            outcome = ReconcileOutcome(failed=True)
            self._hooks.finished(key, outcome, True)
            return outcome
        self._hooks.finished(key, outcome, False)
        return outcome

    def _finish(self, key: ObjectKey, outcome: ReconcileOutcome) -> None:
        self._running.discard(key)
        if key in self._forgotten:
            self._forgotten.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._hooks.dropped(key)
            self.rate_limiter.forget(key)
            self._notify()
            return
        delay: float | None
        if outcome.failed:
            delay = self.rate_limiter.when(key)
            log.info("work queue %s: %s failed (%d in a row); retrying in %.1fs", self.name, key,
                     self.rate_limiter.failures(key), delay)
        else:
            self.rate_limiter.forget(key)
            delay = outcome.requeue_after
        if key in self._dirty:
            # New information arrived during the run: run again now; that run's outcome decides timers.
            self._cancel_timer(key)
            self._requeue_dirty(key)
        elif delay is not None:
            self._schedule(key, delay)
        self._notify()
