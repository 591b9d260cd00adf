"""Per-watch work queue: controller-runtime's workqueue + controller loop, in asyncio.

Why a queue between kopf and the runs: Kubernetes delivers many events per object (spec edits, our own
status writes, dependent-resource changes, resync timers). Running one playbook per event would run the
same object concurrently and waste runs on stale state. Like controller-runtime we therefore turn events
into *keys* and guarantee:

* at most one reconcile per key at a time;
* adds while a key is queued coalesce (no-op); adds while it runs mark it *dirty*, which yields exactly
  one follow-up run after the current one, however many adds arrived;
* at most ``max_concurrent`` reconciles per queue (one queue per watch); among keys of one
  :class:`Priority`, FIFO per namespace, the namespaces taking turns: a burst of thousands of objects in
  one namespace does not hold up another namespace's (with one namespace: FIFO);
* fairness: a key a user's change queued (:attr:`Priority.USER`: a new object, a new generation, a
  deletion, an unconverged object at start-up) goes ahead of *background* work (:attr:`Priority.BACKGROUND`:
  periodic resyncs, dependent-resource echoes, retries after backoff), so a new object never waits behind
  thousands of resyncs. Background work is never starved: after ``fairness`` user keys in a row taken
  while background keys wait, the next key taken is the oldest background one (at least one background
  run per ``fairness + 1``). A user add of a key queued as background moves it to the user queue; a
  running key's follow-up keeps the highest priority of the adds that marked it dirty; a timer fires as
  background unless scheduled as user (when timers merge, the higher priority is kept);
* periodic resyncs (:attr:`ReconcileOutcome.resync`) are stretched by a random ``0..resync_jitter`` of
  the period (controller-runtime's ``SyncPeriod`` jitter), so objects converged together drift apart;
* a failed reconcile (or one that raised) is retried after a per-key exponential backoff
  (:class:`RateLimiter`); a success resets the backoff; ``requeue_after`` schedules a later run
  (periodic resync, role-requested requeue);
* a new event (:meth:`WorkQueue.add`) while a backoff/resync timer is pending runs the key now and drops
  the timer: the run's own outcome decides what comes next. The failure count keeps growing until a
  success, so a persistently failing object still backs off;
* :meth:`WorkQueue.pause` (leader election lost / not yet won) keeps collecting keys but starts nothing;
* a :attr:`WorkQueue.gate` (sharding: is the object this replica's?) refuses keys at every add and again
  when a worker takes one: a refused key is neither queued nor run.

Metrics are not kept here: the queue calls a :class:`QueueHooks` (``metrics.ControllerMetrics`` exports
controller-runtime's ``workqueue_*`` and ``controller_runtime_*`` series from these calls) at the points
where client-go's workqueue and controller-runtime's controller record theirs.

Everything here runs on the event-loop thread; no locks are needed because nothing awaits between a
check and the state change that depends on it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Hashable, Protocol

log = logging.getLogger(__name__)

__all__ = ["ObjectKey", "Priority", "QueueHooks", "ReconcileOutcome", "RateLimiter", "WorkQueue",
           "resync_delay"]

DEFAULT_FAIRNESS = 10
"""User keys taken in a row, while background keys wait, before one background key is taken."""

DEFAULT_RESYNC_JITTER = 0.1
"""Periodic resyncs wait their period plus up to this fraction of it (controller-runtime's 10 %)."""


class Priority(enum.IntEnum):
    """Which of a queue's two lines a key waits in: user changes go first (see the module docstring)."""

    BACKGROUND = 0
    """Periodic resyncs, dependent-resource echoes, retries after backoff, converged objects at start-up."""
    USER = 1
    """A change a user made: a new object, a new generation, a deletion, an unconverged object."""


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
    resync: bool = False
    """``requeue_after`` is the periodic resync (the reconcile period): the queue adds its jitter."""
    priority: Priority = Priority.BACKGROUND
    """The line the requeue waits in (USER: the run saw a newer generation arrive; run it first)."""


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


class _Line:
    """One priority's waiting keys: a FIFO per namespace, the namespaces served in turn (round robin), so a
    burst of keys in one namespace does not hold up another namespace's (the flows of the API server's
    Priority and Fairness, distinguished by namespace). One namespace (or cluster-scoped objects only):
    a plain FIFO.

    Entries are ``(ticket, key)``; the queue says which are live (``take``'s ``live``) and when one went
    stale (``discard``): O(1) upgrades and drops, stale entries skipped when reached."""

    def __init__(self) -> None:
        self._fifos: dict[str | None, deque[tuple[int, ObjectKey]]] = {}
        self._live: dict[str | None, int] = {}     # namespace → live entries in its FIFO
        self._turns: deque[str | None] = deque()   # namespaces to serve, next first (some may have none left)
        self._scheduled: set[str | None] = set()   # the namespaces in _turns
        self.waiting = 0
        """Live entries in all."""

    def append(self, ticket: int, key: ObjectKey) -> None:
        ns = key.namespace
        fifo = self._fifos.get(ns)
        if fifo is None:
            fifo = self._fifos[ns] = deque()
        fifo.append((ticket, key))
        self._live[ns] = self._live.get(ns, 0) + 1
        self.waiting += 1
        if ns not in self._scheduled:
            self._scheduled.add(ns)
            self._turns.append(ns)

    def discard(self, key: ObjectKey) -> None:
        """A live entry of ``key`` went stale (taken, upgraded, forgotten)."""
        ns = key.namespace
        self.waiting -= 1
        self._live[ns] -= 1
        if not self._live[ns]:  # only stale entries left in its FIFO
            del self._live[ns]
            del self._fifos[ns]

    def take(self, live: Callable[[int, ObjectKey], bool]) -> ObjectKey | None:
        """The oldest live key of the namespace whose turn it is (stale entries on the way are dropped);
        that namespace's next turn comes after every other namespace's. The caller discards it."""
        while self._turns:
            ns = self._turns.popleft()
            self._scheduled.discard(ns)
            fifo = self._fifos.get(ns)
            while fifo:
                ticket, key = fifo.popleft()
                if live(ticket, key):
                    if self._live[ns] > 1:  # more after this one: its next turn
                        self._scheduled.add(ns)
                        self._turns.append(ns)
                    return key
        return None


def resync_delay(period: float, jitter: float, rng: random.Random) -> float:
    """``period`` stretched by a uniform ``0..jitter`` fraction of itself (never shortened: an object is not
    re-checked before its period is up)."""
    return period * (1.0 + rng.uniform(0.0, jitter)) if jitter > 0 and period > 0 else period


ReconcileFn = Callable[[ObjectKey], Awaitable[ReconcileOutcome]]


class WorkQueue:
    """Serializes, coalesces, rate-limits and parallelizes reconciles of one watch's objects."""

    def __init__(self, name: str, reconcile: ReconcileFn, *, max_concurrent: int,
                 rate_limiter: RateLimiter | None = None,
                 clock: Callable[[], float] = time.monotonic, hooks: QueueHooks | None = None,
                 fairness: int = DEFAULT_FAIRNESS, resync_jitter: float = DEFAULT_RESYNC_JITTER,
                 rng: random.Random | None = None) -> None:
        if max_concurrent < 1:
            raise ValueError(f"work queue {name!r}: max_concurrent must be >= 1 (got {max_concurrent})")
        if fairness < 1:
            raise ValueError(f"work queue {name!r}: fairness must be >= 1 (got {fairness})")
        if not 0.0 <= resync_jitter <= 1.0:
            raise ValueError(f"work queue {name!r}: resync_jitter must be in [0, 1] (got {resync_jitter})")
        self.name = name
        self.fairness = fairness
        self.resync_jitter = resync_jitter
        self._rng = rng or random.Random()
        self.max_concurrent = max_concurrent
        self.rate_limiter = rate_limiter or RateLimiter()
        self._reconcile = reconcile
        self._clock = clock
        self._hooks: QueueHooks = hooks if hooks is not None else _NoHooks()

        # One line per priority, of (ticket, key), FIFO per namespace with the namespaces in turn. A key's
        # live entry is the one whose ticket _queued holds; others are stale (the key was upgraded, forgotten
        # or taken) and skipped: O(1) upgrades and drops.
        self._lines: dict[Priority, _Line] = {p: _Line() for p in Priority}
        self._queued: dict[ObjectKey, tuple[Priority, int]] = {}  # key → (line, ticket) of its live entry
        self._ticket = 0
        self._user_streak = 0                     # user keys taken in a row while background ones waited
        self._running: set[ObjectKey] = set()
        self._dirty: dict[ObjectKey, Priority] = {}  # added while running → one follow-up, at this priority
        self._forgotten: set[ObjectKey] = set()   # forgotten while running → no follow-up, no timer
        # key → (due, handle, priority it fires at)
        self._timers: dict[ObjectKey, tuple[float, asyncio.TimerHandle, Priority]] = {}

        self._waiters: list[asyncio.Future[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._paused = False
        self._stopping = False
        self.gate: Callable[[ObjectKey], bool] | None = None
        """Keys it refuses are not queued (``add``, ``add_after``) nor started (sharding: another replica's
        objects). None: every key is admitted."""

    # ------------------------------------------------------------------ metrics-facing properties
    @property
    def depth(self) -> int:
        """Keys ready to run but not yet started, of both priorities (delayed ones not counted)."""
        return len(self._queued)

    def waiting(self, priority: Priority) -> int:
        """Keys of ``priority`` ready to run but not yet started."""
        return self._lines[priority].waiting

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

    def running(self) -> frozenset[ObjectKey]:
        """The keys whose reconcile runs right now."""
        return frozenset(self._running)

    # ------------------------------------------------------------------ producers
    def add(self, key: ObjectKey, priority: Priority = Priority.USER) -> None:
        """Enqueue ``key`` now. Coalesces with a queued one (a USER add moves a key queued as BACKGROUND
        to the user line); marks a running one dirty.

        A pending delayed add for ``key`` is dropped: running now subsumes it (at the higher of the two
        priorities), and this run's outcome decides the next backoff/requeue. The backoff failure count is
        *not* reset.
        """
        if self._stopping:
            log.debug("work queue %s stopped; ignoring add of %s", self.name, key)
            return
        if self.gate is not None and not self.gate(key):
            return
        self._forgotten.discard(key)
        pending = self._cancel_timer(key)
        self._add_now(key, max(priority, pending) if pending is not None else priority)

    def add_after(self, key: ObjectKey, delay: float, priority: Priority = Priority.BACKGROUND) -> None:
        """Add ``key`` after ``delay`` seconds, at ``priority``; the soonest of several pending delayed adds
        wins (keeping the higher priority)."""
        if self._stopping:
            log.debug("work queue %s stopped; ignoring delayed add of %s", self.name, key)
            return
        if self.gate is not None and not self.gate(key):
            return
        self._forgotten.discard(key)
        self._schedule(key, delay, priority)

    def forget(self, key: ObjectKey) -> None:
        """The object is gone: cancel its timers, reset backoff, drop it from the queue.

        A running reconcile is left to finish, but gets no follow-up run and schedules no timer, unless a
        new add arrives for the key after this call.
        """
        self._cancel_timer(key)
        self.rate_limiter.forget(key)
        if self._dirty.pop(key, None) is not None:
            self._hooks.dropped(key)
        if self._unqueue(key):
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
        while self._queued or self._running or self._has_due_timer():
            await self._wait_change()

    # ------------------------------------------------------------------ internals
    def _add_now(self, key: ObjectKey, priority: Priority) -> None:
        if key in self._running:
            dirty = self._dirty.get(key)
            if dirty is None:
                self._hooks.added(key)
            if dirty is None or priority > dirty:
                self._dirty[key] = priority
            return
        queued = self._queued.get(key)
        if queued is not None:
            if priority > queued[0]:
                self._unqueue(key)
                self._enqueue(key, priority)  # an upgrade: the same add (no hook), in the user line
                self._notify()
            return
        self._enqueue(key, priority)
        self._hooks.added(key)
        self._notify()

    def _enqueue(self, key: ObjectKey, priority: Priority) -> None:
        self._ticket += 1
        self._queued[key] = (priority, self._ticket)
        self._lines[priority].append(self._ticket, key)

    def _unqueue(self, key: ObjectKey) -> bool:
        """Take ``key`` out of its line (its entry goes stale); whether it was queued."""
        queued = self._queued.pop(key, None)
        if queued is None:
            return False
        self._lines[queued[0]].discard(key)
        return True

    def _take(self, priority: Priority) -> ObjectKey | None:
        """The next live key of ``priority``'s line: the oldest of the namespace whose turn it is."""
        key = self._lines[priority].take(lambda ticket, key: self._queued.get(key) == (priority, ticket))
        if key is not None:
            self._unqueue(key)
        return key

    def _pop(self) -> ObjectKey | None:
        """The next key to run: user keys first, but one background key after ``fairness`` user keys taken
        in a row while background keys waited."""
        background_waits = self._lines[Priority.BACKGROUND].waiting > 0
        starving = background_waits and self._user_streak >= self.fairness
        if self._lines[Priority.USER].waiting and not starving:
            if background_waits:
                self._user_streak += 1
            return self._take(Priority.USER)
        self._user_streak = 0
        return self._take(Priority.BACKGROUND)

    def _requeue_dirty(self, key: ObjectKey) -> None:
        """The follow-up run of a key marked dirty while it ran (already counted as added)."""
        priority = self._dirty.pop(key, Priority.USER)
        if key not in self._queued:
            self._enqueue(key, priority)

    def _schedule(self, key: ObjectKey, delay: float, priority: Priority) -> None:
        if self._stopping:
            return
        self._hooks.retried(key)
        if delay <= 0:
            pending_priority = self._cancel_timer(key)
            self._add_now(key, priority if pending_priority is None else max(priority, pending_priority))
            return
        due = self._clock() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:  # the earlier one wins, at the higher priority
                if priority > pending[2]:
                    self._timers[key] = (pending[0], pending[1], priority)
                return
            pending[1].cancel()
            priority = max(priority, pending[2])
        handle = asyncio.get_running_loop().call_later(delay, self._fire, key)
        self._timers[key] = (due, handle, priority)

    def _fire(self, key: ObjectKey) -> None:
        pending = self._timers.pop(key, None)
        if not self._stopping and pending is not None:
            self._add_now(key, pending[2])
        self._notify()

    def _cancel_timer(self, key: ObjectKey) -> Priority | None:
        """Drop ``key``'s pending delayed add; the priority it would have fired at, if there was one."""
        pending = self._timers.pop(key, None)
        if pending is None:
            return None
        pending[1].cancel()
        return pending[2]

    def _has_due_timer(self) -> bool:
        now = self._clock()
        return any(due <= now for due, _, _ in self._timers.values())

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
            if not self._paused and self._queued:
                key = self._pop()
                if key is not None:
                    return key
            await self._wait_change()
        return None

    async def _worker(self) -> None:
        while True:
            key = await self._next_key()
            if key is None:
                return
            if self.gate is not None and not self.gate(key):
                self._hooks.dropped(key)  # no longer ours (sharding): left without a run
                self._notify()
                continue
            self._running.add(key)
            self._hooks.started(key)
            try:
                outcome = await self._call(key)
            except asyncio.CancelledError:
                self._running.discard(key)
                self._dirty.pop(key, None)
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
            if self._dirty.pop(key, None) is not None:
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
            if delay is not None and outcome.resync:
                delay = resync_delay(delay, self.resync_jitter, self._rng)
        if key in self._dirty:
            # New information arrived during the run: run again now; that run's outcome decides timers.
            pending = self._cancel_timer(key)
            if pending is not None and pending > self._dirty[key]:
                self._dirty[key] = pending
            self._requeue_dirty(key)
        elif delay is not None:
            self._schedule(key, delay, Priority.BACKGROUND if outcome.failed else outcome.priority)
        self._notify()
