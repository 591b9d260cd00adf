"""The membership and hand-over state machine, with a fake clock and an in-memory Lease store.

Pure :class:`Membership` first; then several :class:`ShardCoordinator` replicas sharing one fake store,
each with a real WorkQueue and ObjectCache, stepped by hand: who runs what, and that a run of one object
never starts on one replica while another still runs it (unless the hand-over is skipped on purpose).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from dataclasses import dataclass, field

import pytest

from ansible_operator.intake import ObjectCache, fingerprint
from ansible_operator.kubetypes import KubeObject
from ansible_operator.queue import ObjectKey, ReconcileOutcome, WorkQueue
from ansible_operator.sharding.coordinator import ShardCoordinator, ShardedWatch
from ansible_operator.sharding.leases import LeaseLost
from ansible_operator.sharding.membership import GC_AFTER_LEASES, LeaseView, Membership
from ansible_operator.sharding.ring import HashRing

LEASE, RENEW, RETRY = 15.0, 10.0, 2.0


def view(identity: str, renew: str, drained: str | None = None, duration: float = LEASE) -> LeaseView:
    return LeaseView(name=f"l-{identity}", identity=identity, renew_time=renew, lease_duration=duration,
                     drained=drained, resource_version=renew)


# ---- Membership (pure) ----------------------------------------------------------------------------------

def test_members_are_the_leases_renewed_within_their_duration_on_our_clock() -> None:
    m = Membership("a")
    change = m.observe([view("a", "1"), view("b", "1")], now=100.0, holding=True)
    assert change is not None and change.old is None and change.new.members == ("a", "b")
    # b's renewTime says nothing about liveness (other clocks): only whether it changes
    assert m.observe([view("a", "2"), view("b", "1")], now=114.0, holding=True) is None
    change = m.observe([view("a", "3"), view("b", "1")], now=115.0, holding=True)
    assert change is not None and change.new.members == ("a",)
    # a renewal brings it back
    change = m.observe([view("a", "4"), view("b", "2")], now=116.0, holding=True)
    assert change is not None and change.new.members == ("a", "b")


def test_a_deleted_lease_leaves_at_once_and_we_are_a_member_only_while_holding() -> None:
    m = Membership("a")
    m.observe([view("a", "1"), view("b", "1")], now=0.0, holding=True)
    change = m.observe([view("a", "2")], now=1.0, holding=True)
    assert change is not None and change.new.members == ("a",)
    change = m.observe([view("a", "3"), view("b", "1")], now=2.0, holding=False)
    assert change is not None and change.new.members == ("b",)


def test_settled_needs_every_member_drained_for_this_very_version() -> None:
    m = Membership("a")
    m.observe([view("a", "1"), view("b", "1")], now=0.0, holding=True)
    assert m.ring is not None
    version = m.ring.version
    assert not m.settled() and m.waiting_for() == ["a", "b"]
    m.own_drained = version
    assert not m.settled() and m.waiting_for() == ["b"]
    m.observe([view("a", "2"), view("b", "2", drained="another-version")], now=1.0, holding=True)
    assert not m.settled()
    m.observe([view("a", "3"), view("b", "3", drained=version)], now=2.0, holding=True)
    assert m.settled() and m.waiting_for() == []
    # an annotation change alone is not a renewal: b still expires on schedule
    m.observe([view("a", "4"), view("b", "3", drained="x")], now=10.0, holding=True)
    change = m.observe([view("a", "5"), view("b", "3", drained="x")], now=17.5, holding=True)
    assert change is not None and change.new.members == ("a",)


def test_leftover_leases_are_stale_after_several_durations() -> None:
    m = Membership("a")
    m.observe([view("a", "1"), view("b", "1")], now=0.0, holding=True)
    assert m.stale(GC_AFTER_LEASES * LEASE - 1) == []
    assert [v.identity for v in m.stale(GC_AFTER_LEASES * LEASE)] == ["b"]


# ---- replicas with a fake store and a fake clock ---------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeLeases:
    """The API server's Leases of one ring."""

    def __init__(self) -> None:
        self.leases: dict[str, LeaseView] = {}
        self.versions = itertools.count(1)


class FakeStore:
    def __init__(self, leases: FakeLeases, identity: str) -> None:
        self.ring = "widgets"
        self.leases = leases
        self.identity = identity
        self.name = f"l-{identity}"
        self.failing = False
        self.deleted_under_us = False
        self.latency = 0.0
        """Seconds each call takes (real time), as a loaded API server answers; past ``timeout``: it fails."""
        self.renewals = 0

    async def _answer(self, timeout: float) -> None:
        await asyncio.sleep(min(self.latency, timeout))
        if self.latency > timeout:
            raise TimeoutError()

    async def renew(self, drained: str | None, timeout: float) -> None:
        await self._answer(timeout)
        self.renewals += 1
        if self.failing:
            raise ConnectionError("API server unreachable")
        if self.deleted_under_us:
            raise LeaseLost("deleted")
        rv = str(next(self.leases.versions))
        self.leases.leases[self.name] = LeaseView(self.name, self.identity, rv, LEASE, drained, rv)

    async def members(self, timeout: float) -> list[LeaseView]:
        await self._answer(timeout)
        if self.failing:
            raise ConnectionError("API server unreachable")
        return list(self.leases.leases.values())

    async def delete(self, view: LeaseView, timeout: float) -> None:
        current = self.leases.leases.get(view.name)
        if current is not None and current.resource_version == view.resource_version:
            del self.leases.leases[view.name]

    async def release(self, timeout: float) -> None:
        self.leases.leases.pop(self.name, None)


@dataclass
class Runs:
    """Every run of every replica: (replica, key, start seq, end seq); sequence numbers order them."""

    seq: itertools.count[int] = field(default_factory=itertools.count)
    done: list[tuple[str, ObjectKey, int, int]] = field(default_factory=list)
    running: dict[tuple[str, ObjectKey], int] = field(default_factory=dict)
    holds: dict[ObjectKey, asyncio.Event] = field(default_factory=dict)

    def overlaps(self) -> list[tuple[ObjectKey, str, str]]:
        spans = self.done + [(r, k, s, 1 << 30) for (r, k), s in self.running.items()]
        out = []
        for (r1, k1, s1, e1), (r2, k2, s2, e2) in itertools.combinations(spans, 2):
            if k1 == k2 and r1 != r2 and s1 < e2 and s2 < e1:
                out.append((k1, r1, r2))
        return out

    def by(self, replica: str) -> set[ObjectKey]:
        return {k for r, k, _, _ in self.done if r == replica} | {k for r, k in self.running if r == replica}


class Replica:
    def __init__(self, name: str, leases: FakeLeases, clock: Clock, runs: Runs, cache: ObjectCache,
                 skip_handover: bool = False) -> None:
        self.name = name
        self.runs = runs
        self.fenced = 0
        self.store = FakeStore(leases, name)
        self.queue = WorkQueue(f"widgets@{name}", self.reconcile, max_concurrent=4)
        self.queue.pause()  # as the manager starts them under --sharding
        self.coordinator = ShardCoordinator(
            self.store, Membership(name, vnodes=50), [ShardedWatch("Widget.example.com", self.queue, cache)],
            lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY, on_fenced=self.on_fenced,
            clock=clock, skip_handover=skip_handover)

    async def reconcile(self, key: ObjectKey) -> ReconcileOutcome:
        self.runs.running[(self.name, key)] = next(self.runs.seq)
        hold = self.runs.holds.get(key)
        if hold is not None:
            await hold.wait()
        start = self.runs.running.pop((self.name, key))
        self.runs.done.append((self.name, key, start, next(self.runs.seq)))
        return ReconcileOutcome()

    async def on_fenced(self) -> None:
        self.fenced += 1
        await self.queue.stop(cancel_running=True)


def make_cache(n: int) -> tuple[ObjectCache, list[ObjectKey]]:
    cache = ObjectCache()
    keys = []
    rng = random.Random(n)
    for i in range(n):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))  # random, as the API server's
        obj: KubeObject = {"metadata": {"namespace": "ns", "name": f"w{i}", "uid": uid, "generation": 1}}
        key = ObjectKey("ns", f"w{i}")
        cache.store(key, obj, fingerprint(obj, watch_annotations=False, selected=True))
        keys.append(key)
    return cache, keys


async def settle(*replicas: Replica, rounds: int = 4) -> None:
    """Step every replica a few times, letting the queues run in between."""
    for _ in range(rounds):
        for r in replicas:
            await r.coordinator.step()
        for _ in range(20):
            await asyncio.sleep(0)


async def start(replicas: list[Replica], keys: list[ObjectKey]) -> None:
    for r in replicas:
        await r.queue.start()
        for key in keys:  # the start-up listing: every replica's intake sees every object
            r.queue.add(key)


@pytest.fixture
def world() -> tuple[FakeLeases, Clock, Runs]:
    return FakeLeases(), Clock(), Runs()


async def stop(*replicas: Replica) -> None:
    for r in replicas:
        await r.queue.stop()


async def test_replicas_split_the_objects_and_run_each_once(world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(30)
    replicas = [Replica(n, leases, clock, runs, cache) for n in ("a", "b", "c")]
    for r in replicas:  # started together: each one's first listing shows the others
        await r.store.renew(None, 1)
    await start(replicas, keys)
    await settle(*replicas)
    for r in replicas:
        await asyncio.wait_for(r.queue.wait_idle(), 5)
    owned = [runs.by(r.name) for r in replicas]
    assert sum(len(o) for o in owned) == 30 and set().union(*owned) == set(keys)
    assert all(5 <= len(o) <= 15 for o in owned), [len(o) for o in owned]
    assert not runs.overlaps()
    assert all(r.coordinator.ready() is True for r in replicas)
    await stop(*replicas)


async def test_nothing_runs_before_the_ring_is_settled(world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(10)
    a, b = Replica("a", leases, clock, runs, cache), Replica("b", leases, clock, runs, cache)
    await start([a, b], keys)
    await a.coordinator.step()  # a sees only itself (b's lease does not exist yet): settles alone
    await b.coordinator.step()  # b sees a and b; a has not drained for that ring
    await asyncio.sleep(0)
    assert b.queue.paused and not runs.by("b")
    await settle(a, b)
    for r in (a, b):
        await asyncio.wait_for(r.queue.wait_idle(), 5)
    assert runs.by("a") | runs.by("b") == set(keys) and not runs.overlaps()
    await stop(a, b)


async def joining(world: tuple[FakeLeases, Clock, Runs], skip_handover: bool) -> tuple[Replica, Replica,
                                                                                         ObjectKey, Runs]:
    """a runs everything; one of its objects is in flight (held) when b joins and gains it."""
    leases, clock, runs = world
    cache, keys = make_cache(40)
    a = Replica("a", leases, clock, runs, cache)
    b = Replica("b", leases, clock, runs, cache, skip_handover=skip_handover)
    ring = HashRing(["a", "b"], vnodes=50)
    moving = next(k for k in keys if ring.owner(cache.uid(k) or "") == "b")
    runs.holds[moving] = asyncio.Event()
    await start([a], keys)
    await settle(a)
    assert ("a", moving) in runs.running  # in flight on a
    await b.queue.start()
    for key in keys:
        b.queue.add(key)
    return a, b, moving, runs


async def test_a_joiner_waits_for_the_old_owner_to_finish_a_run_in_flight(
        world: tuple[FakeLeases, Clock, Runs]) -> None:
    a, b, moving, runs = await joining(world, skip_handover=False)
    await settle(b, a, b, a)
    assert ("a", moving) in runs.running and moving not in runs.by("b")
    assert b.queue.paused and a.queue.paused  # nobody starts anything until a has drained
    runs.holds[moving].set()
    await settle(a, b, a, b)
    for r in (a, b):
        await asyncio.wait_for(r.queue.wait_idle(), 5)
    assert moving in runs.by("b")
    assert not runs.overlaps()
    await stop(a, b)


async def test_skipping_the_handover_lets_two_replicas_run_one_object(
        world: tuple[FakeLeases, Clock, Runs]) -> None:
    """The test of the test: without the drained check the overlap check above does fail."""
    a, b, moving, runs = await joining(world, skip_handover=True)
    await settle(b, a, b)
    assert [k for k, _, _ in runs.overlaps()] == [moving]
    runs.holds[moving].set()
    await stop(a, b)


async def test_an_expired_member_s_objects_go_to_the_others(world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(30)
    a, b, c = (Replica(n, leases, clock, runs, cache) for n in ("a", "b", "c"))
    await start([a, b, c], keys)
    await settle(a, b, c)
    c_objects = runs.by("c")
    assert c_objects
    await c.queue.stop(cancel_running=False)  # kill -9: c renews no more
    for _ in range(int(LEASE / RETRY) + 2):
        clock.now += RETRY
        await settle(a, b, rounds=1)
    await settle(a, b)  # each sees the other's acknowledgement
    for r in (a, b):
        await asyncio.wait_for(r.queue.wait_idle(), 5)
    rerun = {k for r, k, _, _ in runs.done if r in ("a", "b") and k in c_objects}
    assert rerun == c_objects
    assert a.coordinator.membership.ring is not None and a.coordinator.membership.ring.members == ("a", "b")
    assert not runs.overlaps()
    # and once it has not changed for several durations, its lease is collected
    for _ in range(int(GC_AFTER_LEASES * LEASE / RETRY) + 1):
        clock.now += RETRY
        await settle(a, b, rounds=1)
    assert "l-c" not in leases.leases
    await stop(a, b)


async def test_a_replica_that_cannot_renew_fences_itself_before_its_lease_expires(
        world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(10)
    a = Replica("a", leases, clock, runs, cache)
    await start([a], keys)
    await settle(a)
    assert not a.queue.paused
    a.store.failing = True
    clock.now += RENEW - 1
    await a.coordinator.step()
    assert a.fenced == 0 and a.coordinator.ready() is True  # within the deadline: still acting
    clock.now += 1
    await a.coordinator.step()
    assert a.fenced == 1 and a.queue.paused
    assert a.coordinator.ready() == (False, "shard lease not held (fenced)")
    assert a.queue.gate is not None and not a.queue.gate(keys[0])


@pytest.mark.looptime
async def test_slow_answers_neither_delay_renewals_nor_fence_a_replica_that_gets_them() -> None:
    """A loaded API server: every call takes 0.25 s, listing the ring's Leases times out. Renewal has a loop
    of its own and each renewal may take until the deadline, so the replica keeps holding its Lease (a
    renewal bounded by twice the retry period, after each listing, fenced it).

    On the loop's fake time (looptime): sleeps, timeouts and the coordinator's clock all follow the loop, so
    a busy machine that delays the test's thread cannot fence the replica (real time did, in CI)."""
    leases = FakeLeases()
    cache, _keys = make_cache(3)

    async def reconcile(key: ObjectKey) -> ReconcileOutcome:
        return ReconcileOutcome()

    queue = WorkQueue("w", reconcile, max_concurrent=1)
    store = FakeStore(leases, "a")
    fenced: list[bool] = []

    async def on_fenced() -> None:
        fenced.append(True)

    coordinator = ShardCoordinator(store, Membership("a"), [ShardedWatch("w", queue, cache)],
                                   lease_duration=0.9, renew_deadline=0.6, retry_period=0.1,
                                   on_fenced=on_fenced, clock=asyncio.get_running_loop().time)
    store.latency = 0.25
    task = asyncio.create_task(coordinator.run())
    await asyncio.sleep(2.0)
    assert not fenced and coordinator.holding
    assert store.renewals >= 5
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_deleted_own_lease_fences_at_once(world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(3)
    a = Replica("a", leases, clock, runs, cache)
    await start([a], keys)
    await settle(a)
    a.store.deleted_under_us = True
    await a.coordinator.step()
    assert a.fenced == 1


async def test_the_gate_refuses_other_replicas_objects_and_leaving_deletes_the_lease(
        world: tuple[FakeLeases, Clock, Runs]) -> None:
    leases, clock, runs = world
    cache, keys = make_cache(20)
    a, b = Replica("a", leases, clock, runs, cache), Replica("b", leases, clock, runs, cache)
    await start([a, b], keys)
    await settle(a, b)
    assert a.queue.gate is not None and b.queue.gate is not None
    assert all(a.queue.gate(k) != b.queue.gate(k) for k in keys)
    assert not a.queue.gate(ObjectKey("ns", "not-in-the-cache"))
    task = asyncio.create_task(b.coordinator.run())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert set(leases.leases) == {"l-a"}
    await settle(a)  # b left: a owns everything at once, without waiting for b's lease to expire
    assert all(a.queue.gate(k) for k in keys)
    await stop(a, b)


async def test_the_shard_metrics_follow_the_ring(world: tuple[FakeLeases, Clock, Runs]) -> None:
    from ansible_operator.metrics import Metrics

    leases, clock, runs = world
    cache, keys = make_cache(30)
    metrics = Metrics()
    a = Replica("a", leases, clock, runs, cache)
    a.coordinator._metrics = metrics
    await start([a], keys)
    await settle(a)
    text = metrics.exposition().decode()
    assert "ansible_operator_shard_members 1" in text
    assert 'ansible_operator_shard_objects{watch="Widget.example.com"} 30' in text
    b = Replica("b", leases, clock, runs, cache)
    await b.queue.start()
    await settle(b, a)
    text = metrics.exposition().decode()
    moved = next(line for line in text.splitlines()
                 if line.startswith('ansible_operator_shard_moves_total{direction="out"'))
    owned = next(line for line in text.splitlines() if line.startswith("ansible_operator_shard_objects{"))
    assert "ansible_operator_shard_members 2" in text
    assert int(float(moved.split()[-1])) + int(float(owned.split()[-1])) == 30
    await stop(a, b)
