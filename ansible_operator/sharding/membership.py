"""Ring membership and the hand-over protocol, as pure state: leases in, decisions out.

Every replica holds one Lease of its own, labelled with the ring's name, and publishes in it (annotation
:data:`DRAINED_ANNOTATION`) the ring version it has *drained* for: it runs nothing it does not own under
that ring. A replica starts a run only when

* it holds its own Lease (renewed within ``renew_deadline``: see :class:`~.coordinator.ShardCoordinator`),
* it owns the object under its current ring, and
* every live member's Lease, its own included, says ``drained=<current ring version>``.

So when the membership changes, nobody starts anything until everyone has seen the new ring and finished
the runs of objects it lost; a replica still on the old ring has not acknowledged the new version, so the
members on the new one wait for it, and an object is never run by two replicas at once. (The
:func:`~.ring.ring_version` is a hash of the sorted identities, so every replica computes the same one for
the same membership, and an acknowledgement of another membership never counts.)

Liveness is judged on the local clock, as client-go's leader election does (clocks of two pods may disagree
by more than a lease): a member is live while its Lease has changed (a renewal) within its
``leaseDurationSeconds`` *of when this replica saw the change*, never by comparing its ``renewTime`` with
the local clock. A replica just started therefore counts every Lease of the ring as live for one lease
duration, even one a crashed replica left behind; such leftovers are deleted once they have not changed for
:data:`GC_AFTER_LEASES` lease durations (:meth:`Membership.stale`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ansible_operator.sharding.ring import DEFAULT_VNODES, HashRing

__all__ = ["DRAINED_ANNOTATION", "GC_AFTER_LEASES", "RING_LABEL", "LeaseView", "Membership", "RingChange"]

RING_LABEL = "ansible-operator.dev/shard-ring"
"""The label every member Lease of one ring carries; its value is the operator's name."""
DRAINED_ANNOTATION = "ansible-operator.dev/shard-drained"
"""The ring version a member has drained for (runs nothing it does not own under that ring)."""
GC_AFTER_LEASES = 4
"""A Lease unchanged for this many of its durations is a crashed replica's leftover: it is deleted."""


@dataclass(frozen=True)
class LeaseView:
    """What the protocol reads of a member's Lease."""

    name: str
    identity: str
    renew_time: str | None
    lease_duration: float
    drained: str | None
    resource_version: str | None = None

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> "LeaseView":
        meta = lease.get("metadata") or {}
        spec = lease.get("spec") or {}
        return cls(name=str(meta.get("name") or ""), identity=str(spec.get("holderIdentity") or ""),
                   renew_time=spec.get("renewTime"),
                   lease_duration=float(spec.get("leaseDurationSeconds") or 0),
                   drained=(meta.get("annotations") or {}).get(DRAINED_ANNOTATION),
                   resource_version=meta.get("resourceVersion"))

    def progress(self) -> tuple[str, str | None, float]:
        """What changes when the member renews (the drained annotation does not count as a renewal)."""
        return self.identity, self.renew_time, self.lease_duration


@dataclass(frozen=True)
class RingChange:
    old: HashRing | None
    new: HashRing


@dataclass
class _Seen:
    view: LeaseView
    changed_at: float
    """Local clock when this replica first saw the Lease's current ``progress()``."""


@dataclass
class Membership:
    """One replica's view of its ring. Feed it every listing (:meth:`observe`); runs may start while it is
    :meth:`settled` (and only of objects the ring gives us: the coordinator's gate)."""

    identity: str
    vnodes: int = DEFAULT_VNODES
    ring: HashRing | None = None
    own_drained: str | None = None
    """The version our own Lease says we drained for (as last written successfully)."""
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def observe(self, leases: Iterable[LeaseView], now: float, *, holding: bool) -> RingChange | None:
        """A fresh listing of the ring's Leases at local time ``now``; ``holding``: our own Lease is renewed.
        Returns the change when the live membership differs from the current ring's."""
        listed = {v.name: v for v in leases if v.identity}
        for name in list(self._seen):
            if name not in listed:
                del self._seen[name]  # deleted: the member left (or was collected)
        for name, view in listed.items():
            seen = self._seen.get(name)
            if seen is None or seen.view.progress() != view.progress():
                self._seen[name] = _Seen(view, now)
            else:
                seen.view = view  # an annotation or label change: not a renewal
        members = {s.view.identity for s in self._seen.values()
                   if s.view.identity != self.identity and s.changed_at + s.view.lease_duration > now}
        if holding:
            members.add(self.identity)
        if self.ring is not None and set(self.ring.members) == members:
            return None
        old, self.ring = self.ring, HashRing(members, self.vnodes)
        return RingChange(old, self.ring)

    def acks(self) -> dict[str, str | None]:
        """Each current member's drained version, as last listed (our own as last written)."""
        if self.ring is None:
            return {}
        listed = {s.view.identity: s.view.drained for s in self._seen.values()}
        return {m: (self.own_drained if m == self.identity else listed.get(m)) for m in self.ring.members}

    def settled(self) -> bool:
        """Every member of the current ring (us included) has drained for it."""
        ring = self.ring
        return ring is not None and self.identity in ring and all(
            drained == ring.version for drained in self.acks().values())

    def waiting_for(self) -> list[str]:
        """Members that have not drained for the current ring yet (for logs)."""
        version = self.ring.version if self.ring else None
        return sorted(m for m, drained in self.acks().items() if drained != version)

    def stale(self, now: float) -> list[LeaseView]:
        """Other members' Leases unchanged for :data:`GC_AFTER_LEASES` of their durations: leftovers of
        replicas that crashed, to delete (with their ``resourceVersion`` as a precondition)."""
        return [s.view for s in self._seen.values()
                if s.view.identity != self.identity
                and s.changed_at + GC_AFTER_LEASES * max(s.view.lease_duration, 1.0) <= now]
