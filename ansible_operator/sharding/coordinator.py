"""Sharding at run time: renew our member Lease, follow the ring, gate the work queues, hand over.

Every ``retry_period`` the coordinator

1. renews its Lease (publishing the ring version it has drained for). A replica that could not renew for
   ``renew_deadline`` *fences* itself: no run starts any more, and ``on_fenced`` runs (the manager cancels
   the runs in flight and exits, as on a lost leader election Lease). Others count it gone only
   ``lease_duration`` after they last saw it renew, which is later: its runs have stopped by then;
2. lists the ring's Leases (:class:`~.membership.Membership`). On a new membership it *forgets* the
   objects it lost (their queued keys, timers and follow-ups; runs in flight go on) and queues the objects it
   gained, from the watch caches (unconverged ones as user changes, the others as background work);
3. once none of its runs in flight is of an object it lost, publishes ``drained=<new version>``;
4. lets the queues start runs only while every member has drained for the current ring
   (:meth:`Membership.settled`), pausing them otherwise;
5. deletes leftover Leases of crashed replicas.

Every queue gets a gate (:attr:`WorkQueue.gate <ansible_operator.queue.WorkQueue.gate>`): keys of objects
another replica owns are not queued and not started. Before the first ring (the start-up listing) every
key is collected, in the paused queues; the first ring drops those that are not ours.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from ansible_operator.intake import ObjectCache
from ansible_operator.queue import ObjectKey, Priority, WorkQueue
from ansible_operator.sharding.leases import LeaseLost
from ansible_operator.sharding.membership import LeaseView, Membership, RingChange
from ansible_operator.sharding.ring import HashRing, position
from ansible_operator.status import converged

__all__ = ["LeaseStore", "ShardCoordinator", "ShardMetrics", "ShardedWatch", "SHARD_BY"]

log = logging.getLogger(__name__)

SHARD_BY = ("uid", "namespace")
"""``--shard-by``: what places an object on the ring."""


class LeaseStore(Protocol):
    """The Lease calls the coordinator makes (:class:`~.leases.KubeLeaseStore`; a fake in tests)."""

    async def renew(self, drained: str | None, timeout: float) -> None: ...

    async def members(self, timeout: float) -> list[LeaseView]: ...

    async def delete(self, view: LeaseView, timeout: float) -> None: ...

    async def release(self, timeout: float) -> None: ...


class ShardMetrics(Protocol):
    def set_shard_members(self, members: int) -> None: ...

    def set_shard_objects(self, watch: str, owned: int) -> None: ...

    def shard_moved(self, watch: str, direction: str, count: int) -> None: ...


@dataclass
class ShardedWatch:
    """One watch's queue and the cache its intake fills."""

    key: str
    queue: WorkQueue
    cache: ObjectCache


class ShardCoordinator:
    def __init__(self, store: LeaseStore, membership: Membership, watches: list[ShardedWatch], *,
                 lease_duration: float, renew_deadline: float, retry_period: float,
                 on_fenced: Callable[[], Awaitable[None]], shard_by: str = "uid",
                 metrics: ShardMetrics | None = None, clock: Callable[[], float] = time.monotonic,
                 skip_handover: bool = False, on_ring: Callable[[HashRing], None] | None = None,
                 bucketed: bool = False) -> None:
        if not (0 < retry_period < renew_deadline < lease_duration):
            raise ValueError("sharding needs 0 < retry period < renew deadline < lease duration, got"
                             f" retry={retry_period}s renew={renew_deadline}s lease={lease_duration}s")
        if shard_by not in SHARD_BY:
            raise ValueError(f"shard_by must be one of {', '.join(SHARD_BY)} (got {shard_by!r})")
        self.store = store
        self.membership = membership
        self.watches = watches
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.shard_by = shard_by
        self.bucketed = bucketed
        """``--shard-label``: objects are placed by bucket (:func:`~.ring.position`)."""
        self._on_fenced = on_fenced
        self._metrics = metrics
        self._clock = clock
        self.on_ring = on_ring
        """Called with every new ring (server-side sharded watching narrows the watches to our shard)."""
        self.skip_handover = skip_handover
        """Test only: start runs as soon as we own them, without waiting for the others to drain (unsafe:
        it exists so the end-to-end overlap detector can be shown to fail)."""
        self._last_renew: float | None = None
        """Local clock at the start of the last successful renewal; None before the first."""
        self.fenced = False
        self._lost = False
        self.stopping = False
        """Set at shutdown: the queues are drained by the manager and never resumed again."""
        self._settled_version: str | None = None
        self._renewing = asyncio.Lock()
        """One renewal at a time (the renewal loop and an acknowledgement)."""
        self._renew_soon = asyncio.Event()
        """Set when an acknowledgement is due: the renewal loop publishes it now, not a period later."""
        for w in watches:
            w.queue.gate = self._gate(w.cache)

    # ---- state ----------------------------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """Our Lease was renewed within ``renew_deadline`` and we have not fenced ourselves."""
        return (not self.fenced and not self._lost and self._last_renew is not None
                and self._clock() - self._last_renew < self.renew_deadline)

    def ready(self) -> bool | tuple[bool, str]:
        """``/readyz``: the replica holds its Lease."""
        if self.holding:
            return True
        return False, "shard lease not held" + (" (fenced)" if self.fenced else "")

    def shard_key(self, cache: ObjectCache, key: ObjectKey) -> str | None:
        """What places ``key``'s object on the ring; None when the object is unknown (not in the cache)."""
        if self.shard_by == "namespace" and key.namespace:
            return key.namespace
        return cache.uid(key)

    def owns(self, cache: ObjectCache, key: ObjectKey, ring: HashRing | None = None) -> bool:
        ring = ring if ring is not None else self.membership.ring
        shard_key = self.shard_key(cache, key)
        if ring is None or shard_key is None:
            return False
        owner = ring.owner_of_hash(position(shard_key, self.shard_by, self.bucketed))
        return owner == self.membership.identity

    def _gate(self, cache: ObjectCache) -> Callable[[ObjectKey], bool]:
        def admits(key: ObjectKey) -> bool:
            if self.fenced:
                return False
            if self.membership.ring is None:
                return True  # the start-up listing, collected in the paused queues; the first ring sorts it
            return self.owns(cache, key)

        return admits

    def stop(self) -> None:
        """Shutdown began: the manager drains the queues; they are never resumed again."""
        self.stopping = True

    # ---- the loop -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled (leaves the ring: deletes our Lease) or fenced (returns).

        Renewal has a loop of its own, as client-go's leader election does: a slow listing of the ring's
        Leases (a loaded API server) never delays a renewal, and a renewal may take until the deadline."""
        renewals = asyncio.create_task(self._renew_loop(), name="shard-lease-renewal")
        try:
            while not self.fenced:
                if self._last_renew is not None and await self._observe():
                    self._renew_soon.set()
                if self.fenced or renewals.done():
                    break
                await asyncio.sleep(self.retry_period)
        except asyncio.CancelledError:
            await _cancelled(renewals)
            if not self.fenced:
                leave = asyncio.ensure_future(self._leave())
                while not leave.done():
                    try:
                        await asyncio.shield(leave)
                    except asyncio.CancelledError:
                        continue  # bounded by renew_deadline: leave the ring rather than exit holding it
            raise
        await renewals  # fenced: the renewal loop finishes the fencing (on_fenced) undisturbed

    async def _renew_loop(self) -> None:
        """Send a renewal every ``retry_period`` from the last one sent (at once after a slow one, or when
        an acknowledgement is due); fence on the deadline. A renewal taking L seconds thus leaves the next
        ``renew_deadline - max(L, retry_period)`` to land."""
        while not self.fenced:
            sent = self._clock()
            await self._renew()
            if self._check_fenced():
                await self._fence()
                return
            try:
                next_in = max(0.0, sent + self.retry_period - self._clock())
                await asyncio.wait_for(self._renew_soon.wait(), next_in)
            except asyncio.TimeoutError:
                pass
            self._renew_soon.clear()

    async def step(self) -> None:
        """One period, renewal and observation in turn (what :meth:`run`'s two loops do; tests drive this
        with a fake clock)."""
        await self._renew()
        if self._check_fenced():
            await self._fence()
            return
        if self._last_renew is None:
            return  # not a member yet: nothing to judge
        if await self._observe():
            await self._renew()  # publish the acknowledgement now rather than a period later

    async def _observe(self) -> bool:
        """List, follow the ring, collect, gate; whether an acknowledgement is due."""
        # As patient as a renewal: a loaded API server that answers in a few seconds still shows us the
        # ring (a shorter timeout would only repeat the listing and see nothing).
        asked = self._clock()
        try:
            leases = await self.store.members(self.renew_deadline)
        except Exception as exc:  # noqa: BLE001 - keep the last view: acting on none is safe, guessing not
            log.warning("shard ring %s: listing leases failed after %.1fs: %s", self._ring_name(),
                        self._clock() - asked, exc)
            leases = None
        if leases is not None:
            change = self.membership.observe(leases, self._clock(), holding=self.holding)
            if change is not None:
                self._apply(change)
            await self._collect(self._clock())
        ack_due = self._drained() and self.membership.ring is not None \
            and self.membership.own_drained != self.membership.ring.version
        self._update_queues()
        self._publish_metrics()
        return ack_due

    # ---- renewal and fencing ---------------------------------------------------------------------------

    async def _renew(self) -> None:
        async with self._renewing:
            await self._renew_once()

    async def _renew_once(self) -> None:
        started = self._clock()
        ring = self.membership.ring
        target = ring.version if ring is not None and self._drained() else self.membership.own_drained
        # Until the deadline: a slow renewal that lands still counts from when it was sent (others see it
        # later, so count us alive later still: fencing stays ahead of their take-over).
        if self._last_renew is not None:
            timeout = max(0.1, self._last_renew + self.renew_deadline - started)
        else:  # joining: nothing held yet, so nothing to fence; as patient as a renewal may be
            timeout = self.renew_deadline
        try:
            await self.store.renew(target, timeout)
        except LeaseLost as exc:  # deleted: the others count us gone already
            log.error("%s", exc)
            self._lost = True
            return
        except Exception as exc:  # noqa: BLE001 - the deadline decides what a failure means
            log.warning("shard lease: renewal failed: %s: %s", type(exc).__name__, exc)
            return
        if self._last_renew is None:
            log.info("joined shard ring %s as %s", self._ring_name(), self.membership.identity)
        self._last_renew = started
        if target != self.membership.own_drained:
            self.membership.own_drained = target
            if target is not None:
                log.info("shard ring %s: drained for version %s", self._ring_name(), target)

    def _check_fenced(self) -> bool:
        return not self.fenced and self._last_renew is not None and (
            self._lost or self._clock() - self._last_renew >= self.renew_deadline)

    async def _fence(self) -> None:
        """Stop starting runs at once; the manager cancels those in flight (``on_fenced``)."""
        self.fenced = True
        for w in self.watches:
            w.queue.pause()
        log.error("shard ring %s: could not renew our lease within %.1fs: fenced (no run starts; the runs in"
                  " flight are stopped before the others may take their objects over)", self._ring_name(),
                  self.renew_deadline)
        await self._on_fenced()

    async def _leave(self) -> None:
        try:
            await self.store.release(self.renew_deadline)
            log.info("left shard ring %s", self._ring_name())
        except Exception as exc:  # noqa: BLE001 - the others see our lease expire instead
            log.warning("shard ring %s: could not delete our lease (%s); the others wait for it to expire",
                        self._ring_name(), exc)

    # ---- ring changes -------------------------------------------------------------------------------

    def _apply(self, change: RingChange) -> None:
        """Forget what we lost, queue what we gained (runs in flight of lost objects go on: see _drained)."""
        ring, me = change.new, self.membership.identity
        for w in self.watches:
            gained = lost = 0
            for key in w.cache.keys():
                mine = self.owns(w.cache, key, ring)
                if change.old is None:  # the start-up listing is in the queue already
                    if not mine:
                        w.queue.forget(key)
                    continue
                was = self.owns(w.cache, key, change.old)
                if was and not mine:
                    w.queue.forget(key)
                    lost += 1
                elif mine and not was:
                    obj = w.cache.get(key)
                    priority = Priority.BACKGROUND if obj is not None and converged(obj) else Priority.USER
                    w.queue.add(key, priority)
                    gained += 1
            if self._metrics is not None and (gained or lost):
                self._metrics.shard_moved(w.key, "in", gained)
                self._metrics.shard_moved(w.key, "out", lost)
            if gained or lost:
                log.info("%s: shard ring changed: gained %d object(s), lost %d", w.key, gained, lost)
        log.info("shard ring %s: version %s, %d member(s)%s", self._ring_name(), ring.version, len(ring),
                 "" if me in ring else " (not us: our lease is not renewed)")
        if self.on_ring is not None:
            self.on_ring(ring)
        self._update_queues()

    def _drained(self) -> bool:
        """None of our runs in flight is of an object we do not own under the current ring."""
        if self.membership.ring is None or not self.holding:
            return False
        return all(self.owns(w.cache, key) for w in self.watches for key in w.queue.running())

    def _update_queues(self) -> None:
        if self.fenced or self.stopping:
            return
        ring = self.membership.ring
        go = self.holding and ring is not None and (
            self.skip_handover or self.membership.settled())
        for w in self.watches:
            if go and w.queue.paused:
                w.queue.resume()
            elif not go and not w.queue.paused:
                w.queue.pause()
        version = ring.version if go and ring is not None else None
        if version != self._settled_version:
            self._settled_version = version
            if version is not None:
                log.info("shard ring %s: all %d member(s) drained for version %s: running our objects",
                         self._ring_name(), len(ring or ()), version)
            elif ring is not None:
                log.info("shard ring %s: version %s: waiting for %s to drain", self._ring_name(),
                         ring.version, ", ".join(self.membership.waiting_for()) or "our lease")

    async def _collect(self, now: float) -> None:
        for view in self.membership.stale(now):
            try:
                await self.store.delete(view, self.retry_period * 2)
                log.info("shard ring %s: deleted the lease %s of %s (not renewed for a long time)",
                         self._ring_name(), view.name, view.identity)
            except Exception as exc:  # noqa: BLE001 - next period again
                log.debug("deleting stale lease %s: %s", view.name, exc)

    def _publish_metrics(self) -> None:
        if self._metrics is None:
            return
        ring = self.membership.ring
        self._metrics.set_shard_members(len(ring) if ring is not None else 0)
        for w in self.watches:
            self._metrics.set_shard_objects(w.key, sum(1 for k in w.cache.keys() if self.owns(w.cache, k)))

    def _ring_name(self) -> str:
        return str(getattr(self.store, "ring", "")) or "?"

    def __repr__(self) -> str:  # for logs and debugging
        ring: Any = self.membership.ring
        return f"<ShardCoordinator {self.membership.identity} ring={ring.version if ring else None}>"


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end (its own exceptions are logged, not raised here)."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:  # noqa: BLE001 - the renewal loop must not mask why run() ends
        log.exception("shard lease renewal loop failed")
