"""A consistent-hash ring: which replica owns which object.

Objects are placed by the 64-bit FNV-1a hash of a string (the object's ``metadata.uid``, or its namespace
with ``--shard-by=namespace``): the hash Kubernetes' server-side sharded list and watch (KEP-5866,
``shardRange(object.metadata.uid, start, end)``) computes. A member owns the arcs of the hash space that end
at its points: :meth:`HashRing.ranges` gives them as ``[start, end)`` ranges, so ownership can one day be
handed to the API server as a shard selector instead of being tested here, client-side.

Objects placed by another key (``--shard-by=namespace``: names are often alike, ``team-1``, ``team-2``)
use :func:`spread_hash`, FNV-1a mixed the same way.

Where the API server does not serve shard selectors, a replica can still be sent only its shard through a
label (``run --shard-label``): every object carries the *bucket* of its hash (the top :data:`BUCKET_BITS`
bits, as 2 hex digits, :func:`bucket_label`), and a replica lists and watches the buckets it owns
(:meth:`HashRing.buckets`, :func:`bucket_selector`). Labels cannot express ranges, so with buckets an
object is placed at the start of its bucket (:func:`position`): a whole bucket moves at once.

Every member gets ``vnodes`` points (virtual nodes) for balance. Plain FNV-1a spreads short strings that
differ in their last byte over a few neighbouring values only ("a#1", "a#2" ...), so a point is the FNV-1a
hash of ``<member>#<i>`` run through splitmix64's finalizer; object hashes stay plain FNV-1a (they must match
the API server's). Adding or removing a member moves only the objects on the arcs it gains or loses
(about 1/N of them), never objects between the members that stay.

Pure logic: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from typing import Iterable

__all__ = ["BUCKETS", "BUCKET_BITS", "DEFAULT_VNODES", "HashRing", "bucket_label", "bucket_selector",
           "fnv1a64", "position", "ring_version", "shard_selector", "spread_hash"]

DEFAULT_VNODES = 512
"""Points per member: with 3 members each owns 1/3 of the space within about ±4 % (one standard deviation;
100 points gave ±10 %, and with 300 objects one replica in 45 three-replica rings held fewer than 70 or
more than 130 of them; with 512, about one in 450, near the 1 in 1,800 of the objects' own randomness).
A member owns ~2/3 × vnodes arcs: a ``--shard-selector`` of ~350 ranges, ~27 KB in each list and watch
URL."""

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1
SPACE = 1 << 64
"""The size of the hash space: ranges end at most here (the API server's ``0x10000000000000000``)."""


def fnv1a64(value: str) -> int:
    """64-bit FNV-1a of ``value``'s UTF-8 bytes (Go's ``hash/fnv.New64a``)."""
    h = _FNV_OFFSET
    for byte in value.encode():
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


@functools.lru_cache(maxsize=1 << 16)
def _cached_fnv1a64(value: str) -> int:
    """Object keys are hashed again at every ring check: uids do not change."""
    return fnv1a64(value)


def _mix(h: int) -> int:
    """splitmix64's finalizer: every input bit flips about half of the output bits."""
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


def spread_hash(value: str) -> int:
    """FNV-1a, mixed: for shard keys that are not random (namespace names such as ``team-1``, ``team-2``
    would all land on one arc under plain FNV-1a, which moves only the low bits for a last character)."""
    return _mix(_cached_fnv1a64(value))


BUCKET_BITS = 8
BUCKETS = 1 << BUCKET_BITS
"""Buckets of ``--shard-label``: 256 (with 3 members, 85 each ± 9 %; 2-hex-digit label values)."""
_BUCKET_SHIFT = 64 - BUCKET_BITS


def hash_of(shard_key: str, shard_by: str) -> int:
    """Where a shard key hashes to: uids by plain FNV-1a (the API server's hash), namespaces mixed."""
    return spread_hash(shard_key) if shard_by == "namespace" else _cached_fnv1a64(shard_key)


def position(shard_key: str, shard_by: str, bucketed: bool = False) -> int:
    """The point of the ring an object is placed at: its hash, or with ``bucketed`` the start of its
    bucket (every object of a bucket has one owner, whom a label selector can name)."""
    h = hash_of(shard_key, shard_by)
    return (h >> _BUCKET_SHIFT) << _BUCKET_SHIFT if bucketed else h


def bucket_label(shard_key: str, shard_by: str) -> str:
    """The bucket label value of an object whose shard key (uid, namespace) is ``shard_key``."""
    return f"{hash_of(shard_key, shard_by) >> _BUCKET_SHIFT:02x}"


ALL_BUCKET_LABELS = tuple(f"{b:02x}" for b in range(BUCKETS))


def bucket_selector(label: str, buckets: Iterable[int]) -> str | None:
    """A label selector for objects in these buckets (None for none: no selector says "nothing")."""
    values = [f"{b:02x}" for b in sorted(set(buckets))]
    if not values:
        return None
    return f"{label}" if len(values) == BUCKETS else f"{label} in ({','.join(values)})"


def _hex(bound: int) -> str:
    """A bound as the API server parses it: exactly 16 hex digits, or ``0x10000000000000000`` (2^64)."""
    return "0x10000000000000000" if bound == SPACE else f"0x{bound:016x}"


def shard_selector(ranges: Iterable[tuple[int, int]], field: str = "object.metadata.uid") -> str | None:
    """The API server's ``shardSelector`` (KEP-5866) for these ``[start, end)`` hash ranges of ``field``:
    one ``shardRange`` per range, joined with ``||``. None for no range (no selector says "nothing")."""
    terms = [f"shardRange({field}, '{_hex(lo)}', '{_hex(hi)}')" for lo, hi in ranges if lo < hi]
    return " || ".join(terms) or None


def ring_version(members: Iterable[str], vnodes: int = DEFAULT_VNODES) -> str:
    """A short name for one ring: the same set of identities (and points per member) gives the same
    version everywhere. ``vnodes`` is part of it: replicas that would place objects differently (a rolling
    update that changes it) never agree on a version, so they start nothing until the old ones are gone,
    rather than run one object on two replicas."""
    joined = "\n".join([f"vnodes={vnodes}", *sorted(set(members))])
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


class HashRing:
    """Immutable: a new membership is a new ring."""

    def __init__(self, members: Iterable[str], vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes < 1:
            raise ValueError(f"a hash ring needs at least one point per member (got vnodes={vnodes})")
        self.members: tuple[str, ...] = tuple(sorted(set(members)))
        self.vnodes = vnodes
        self.version = ring_version(self.members, vnodes)
        points = sorted((_mix(fnv1a64(f"{member}#{i}")), member)
                        for member in self.members for i in range(vnodes))
        self._points = [p for p, _ in points]
        self._owners = [m for _, m in points]

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, member: object) -> bool:
        return member in self.members

    def owner_of_hash(self, h: int) -> str | None:
        """The member owning hash ``h``: the first point at or after it, wrapping around; None when empty."""
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, h)
        return self._owners[i if i < len(self._points) else 0]

    def owner(self, value: str) -> str | None:
        """The member owning the object whose shard key (uid, namespace) is ``value``."""
        return self.owner_of_hash(_cached_fnv1a64(value))

    def buckets(self, member: str) -> list[int]:
        """The buckets ``member`` owns (each placed at its start: :func:`position` with ``bucketed``)."""
        return [b for b in range(BUCKETS) if self.owner_of_hash(b << _BUCKET_SHIFT) == member]

    def ranges(self, member: str) -> list[tuple[int, int]]:
        """The ``[start, end)`` hash ranges ``member`` owns, merged and sorted (ending at most at
        :data:`SPACE`): what a ``shardRange`` selector per range, joined with ``||``, would ask for."""
        spans: list[tuple[int, int]] = []
        for i, (point, owner) in enumerate(zip(self._points, self._owners)):
            if owner != member:
                continue
            if i:
                spans.append((self._points[i - 1] + 1, point + 1))
                continue
            spans.append((0, point + 1))  # the first point also owns the arc wrapping past the last one
            if self._points[-1] + 1 < SPACE:
                spans.append((self._points[-1] + 1, SPACE))
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(s for s in spans if s[0] < s[1]):
            if merged and merged[-1][1] == lo:
                merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        return merged
