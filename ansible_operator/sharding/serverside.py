"""Server-side shard filtering: the API server sends each replica only the objects of its shard, instead of
every replica listing and watching every object. Two ways, one flow:

* ``run --sharding --shard-selector``: Kubernetes 1.36 serves ``shardSelector`` on list and watch
  (KEP-5866, alpha, feature gate ``ShardedListAndWatch``): ``shardRange(object.metadata.uid, '0x…', '0x…')``
  terms joined with ``||``, over the 64-bit FNV-1a hash of the uid, which is the hash the ring places
  objects by (:meth:`HashRing.ranges`, :func:`~.ring.shard_selector`);
* ``run --sharding --shard-label`` (any Kubernetes): every object carries the label :data:`SHARD_LABEL`,
  the bucket of its hash (:func:`~.ring.bucket_label`), and a replica lists and watches the buckets it owns
  (``ansible-operator.dev/shard-bucket in (…)``, :meth:`HashRing.buckets`). The labels are written by the
  replicas themselves (:mod:`.labeller`): a new object, not labelled yet, is labelled by its owner.

On every ring this replica is a member of, :class:`ServerSideShards` turns what it owns into a selector,
hands it to the watch and has the watch list again (``narrow``: kopf's selector setting and a relist): the
listing brings the objects the replica gained, and those it lost are missing from it, which the intake
takes for a move, not a deletion (:meth:`ShardView.outside`). With labels, an object also leaves a
replica's watch when its label changes (a ``DELETED`` event, which the labeller checks before the intake
takes it for a deletion: :meth:`ShardView.left`), and one carrying the wrong bucket is labelled again
(:meth:`ShardView.seen`).

It only narrows what arrives: which objects run where is still the coordinator's gate and hand-over, so a
server that ignores ``shardSelector`` (an older Kubernetes, the gate off) changes nothing but the savings.
Until the first ring the watch asks for nothing (:meth:`ServerSideShards.start`): the gate refuses every
object then, and the first ring's listing brings this replica's objects as a start-up listing would,
instead of every replica listing every object at start.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable, Iterable, Mapping, Protocol

from ansible_operator.intake import ObjectCache
from ansible_operator.kubetypes import KubeObject
from ansible_operator.queue import ObjectKey
from ansible_operator.sharding.ring import (
    ALL_BUCKET_LABELS,
    HashRing,
    bucket_label,
    bucket_selector,
    position,
    shard_selector,
)

__all__ = ["BucketLabels", "Labelling", "SHARD_LABEL", "ServerSideShards", "ShardView"]

log = logging.getLogger(__name__)

SHARD_LABEL = "ansible-operator.dev/shard-bucket"
"""``--shard-label``: the label holding an object's bucket (2 hex digits)."""

NOTHING_SHARD = "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')"
"""A ``shardSelector`` for (in practice) no object: the hash 0 only. The gate decides anyway."""
NOTHING_LABELLED = f"{SHARD_LABEL} in (none)"
"""A label selector for no object: ``none`` is no bucket."""

_REMEMBERED = 16
"""Selectors (and their rings) remembered: a listing that ends after the ring moved on names an old one."""

Owns = Callable[[ObjectCache, ObjectKey, HashRing], bool]
"""Whether this replica owns a cached object under a ring (the coordinator's :meth:`owns`)."""


class BucketLabels:
    """``--shard-label``: the bucket label an object should carry, and whether we place it."""

    def __init__(self, shard_by: str) -> None:
        self.shard_by = shard_by

    def shard_key(self, obj: KubeObject) -> str | None:
        """As the coordinator's: the namespace with ``--shard-by namespace`` (cluster-scoped objects: the
        uid), else the uid."""
        meta = obj.get("metadata") or {}
        key = (self.shard_by == "namespace" and meta.get("namespace")) or meta.get("uid")
        return str(key) if key else None

    def expected(self, obj: KubeObject) -> str | None:
        key = self.shard_key(obj)
        return bucket_label(key, self.shard_by) if key is not None else None

    @staticmethod
    def carried(obj: KubeObject) -> str | None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        value = labels.get(SHARD_LABEL)
        return str(value) if value is not None else None

    def owner(self, ring: HashRing, obj: KubeObject) -> str | None:
        key = self.shard_key(obj)
        return ring.owner_of_hash(position(key, self.shard_by, bucketed=True)) if key is not None else None

    @staticmethod
    def unlabelled_selector() -> str:
        """Objects without a valid bucket label (none, or not 2 hex digits): the labeller's listing."""
        return f"{SHARD_LABEL} notin ({','.join(ALL_BUCKET_LABELS)})"


class Labelling(Protocol):
    """What a watch's labeller (:class:`~.labeller.ShardLabeller`) does on request."""

    def request(self, obj: KubeObject) -> None:
        """Label ``obj`` with its own bucket soon."""

    def verify(self, obj: KubeObject, gone: Callable[[], None]) -> None:
        """Call ``gone()`` if ``obj`` (its uid) no longer exists."""


class ServerSideShards:
    def __init__(self, identity: str, watches: Iterable[str], narrow: Callable[[str, str], None], *,
                 owns: Owns, labels: BucketLabels | None = None,
                 labellers: Mapping[str, Labelling] | None = None) -> None:
        """``watches``: the watches' keys; ``narrow(watch, selector)`` makes the watch's next requests carry
        the selector and has it list again; ``labels``: with ``--shard-label`` (else ``shardSelector``);
        ``labellers``: each watch's labeller, by key."""
        self.identity = identity
        self.watches = list(watches)
        self._narrow = narrow
        self._owns = owns
        self.labels = labels
        self._labellers = labellers if labellers is not None else {}
        self.selector: str | None = None
        """The selector the watches use now (None: none yet, every object)."""
        self._rings: OrderedDict[str, HashRing] = OrderedDict()
        self._mine: frozenset[str] = frozenset()
        """With labels: the bucket label values our selector selects."""

    def start(self) -> None:
        """Before the first ring: the watches ask for nothing (see the module docstring)."""
        for key in self.watches:
            self._narrow(key, NOTHING_SHARD if self.labels is None else NOTHING_LABELLED)

    def selector_of(self, ring: HashRing) -> str | None:
        if self.labels is None:
            return shard_selector(ring.ranges(self.identity))
        return bucket_selector(SHARD_LABEL, ring.buckets(self.identity))

    def on_ring(self, ring: HashRing) -> None:
        """A new ring: ask for our shard of it. Not a member (our Lease lapsed): keep the last selector,
        the gate refuses everything meanwhile."""
        if self.identity not in ring:
            return
        selector = self.selector_of(ring)
        if selector is None or selector == self.selector:
            return
        self._rings[selector] = ring
        self._rings.move_to_end(selector)
        while len(self._rings) > _REMEMBERED:
            self._rings.popitem(last=False)
        self.selector = selector
        if self.labels is not None:
            self._mine = frozenset(f"{b:02x}" for b in ring.buckets(self.identity))
            log.info("shard label selector: %d of %d bucket(s) of %d member(s); listing again",
                     len(self._mine), len(ALL_BUCKET_LABELS), len(ring))
        else:
            log.info("shard selector: %d hash range(s) of %d member(s); listing again",
                     selector.count("||") + 1, len(ring))
        for key in self.watches:
            self._narrow(key, selector)

    def view(self, watch: str, cache: ObjectCache) -> ShardView:
        """What one watch's intake asks."""
        return ShardView(self, watch, cache)

    def outside(self, cache: ObjectCache, key: ObjectKey, selector: str) -> bool:
        """Whether the cached object ``key`` is not ours under the ring ``selector`` was made for: its
        absence from a listing with that selector is a move to another replica, not a deletion. A selector
        not remembered (or not ours) counts as outside: dropping an object from the cache without taking it
        for deleted is always safe (the next listing or event brings it back). With labels, an object not
        carrying its bucket was missing for that reason (it comes back once labelled)."""
        ring = self._rings.get(selector)
        if ring is None or not self._owns(cache, key, ring):
            return True
        if self.labels is None:
            return False
        obj = cache.peek(key)
        return obj is None or self.labels.carried(obj) != self.labels.expected(obj)

    def left(self, watch: str, obj: KubeObject, gone: Callable[[], None]) -> bool:
        """A ``DELETED`` event of ``obj``: may it have left our label selector (a user changed its label)
        rather than been deleted? The API server's watch sends such an event with the object as it was
        before (our label still on it), so only asking tells: True means the labeller asks and calls
        ``gone()`` if it was deleted after all. An object being deleted (``deletionTimestamp``) was."""
        if self.labels is None or self.selector is None:  # not narrowed by labels: a deletion
            return False
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        labeller = self._labellers.get(watch)
        if labeller is None:
            return False
        labeller.verify(obj, gone)
        return True

    def seen(self, watch: str, obj: KubeObject) -> None:
        """An object arrived: with labels, one carrying another bucket than its own is labelled again. The
        replica whose bucket it wrongly names is the one that sees it (its owner does not); an unlabelled
        one, seen before the first ring, is labelled by its owner (the labeller lists those)."""
        labeller = self._labellers.get(watch)
        if self.labels is None or labeller is None:
            return
        carried = self.labels.carried(obj)
        if carried is not None and carried in ALL_BUCKET_LABELS and carried != self.labels.expected(obj):
            labeller.request(obj)


class ShardView:
    """One watch's questions to :class:`ServerSideShards` (the intake's ``shards``)."""

    def __init__(self, shards: ServerSideShards, watch: str, cache: ObjectCache) -> None:
        self._shards = shards
        self._watch = watch
        self._cache = cache

    def outside(self, key: ObjectKey, selector: str) -> bool:
        return self._shards.outside(self._cache, key, selector)

    def left(self, obj: KubeObject, gone: Callable[[], None]) -> bool:
        return self._shards.left(self._watch, obj, gone)

    def seen(self, obj: KubeObject) -> None:
        self._shards.seen(self._watch, obj)
