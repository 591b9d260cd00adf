"""Server-side sharded watching (``run --sharding --shard-selector``): the API server sends each replica
only the objects of its shard, instead of every replica listing and watching every object.

Kubernetes 1.36 serves ``shardSelector`` on list and watch (KEP-5866, alpha, feature gate
``ShardedListAndWatch``): ``shardRange(object.metadata.uid, '0x…', '0x…')`` terms joined with ``||``, over
the 64-bit FNV-1a hash of the uid, which is the hash the ring places objects by. On every ring this replica
is a member of, :class:`ServerSideShards` turns the ranges it owns (:meth:`HashRing.ranges`) into a
selector, hands it to the watch and has the watch list again (``narrow``: kopf's shard selector setting
and a relist): the listing brings the objects the replica gained, and those it lost are missing from it,
which the intake takes for a move, not a deletion (:meth:`outside`).

It only narrows what arrives: which objects run where is still the coordinator's gate and hand-over, so a
server that ignores the parameter (an older Kubernetes, the gate off) changes nothing but the savings. Until
the first ring the watch lists every object (the ring is not known before the watch starts).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable, Iterable

from ansible_operator.intake import ObjectCache
from ansible_operator.queue import ObjectKey
from ansible_operator.sharding.ring import HashRing, shard_selector

__all__ = ["ServerSideShards"]

log = logging.getLogger(__name__)

_REMEMBERED = 16
"""Selectors (and their rings) remembered: a listing that ends after the ring moved on names an old one."""


class ServerSideShards:
    def __init__(self, identity: str, watches: Iterable[str], narrow: Callable[[str, str], None]) -> None:
        """``watches``: the watches' keys; ``narrow(watch, selector)`` makes the watch's next requests carry
        the selector and has it list again."""
        self.identity = identity
        self.watches = list(watches)
        self._narrow = narrow
        self.selector: str | None = None
        """The selector the watches use now (None: none yet, every object)."""
        self._rings: OrderedDict[str, HashRing] = OrderedDict()

    def on_ring(self, ring: HashRing) -> None:
        """A new ring: ask for our shard of it. Not a member (our Lease lapsed): keep the last selector,
        the gate refuses everything meanwhile."""
        if self.identity not in ring:
            return
        selector = shard_selector(ring.ranges(self.identity))
        if selector is None or selector == self.selector:
            return
        self._rings[selector] = ring
        self._rings.move_to_end(selector)
        while len(self._rings) > _REMEMBERED:
            self._rings.popitem(last=False)
        self.selector = selector
        log.info("shard selector: %d hash range(s) of %d member(s); listing again", selector.count("||") + 1,
                 len(ring))
        for key in self.watches:
            self._narrow(key, selector)

    def outside(self, cache: ObjectCache, key: ObjectKey, selector: str) -> bool:
        """Whether the cached object ``key`` is not ours under the ring ``selector`` was made for: its
        absence from a listing with that selector is a move to another replica, not a deletion. A selector
        not remembered (or not ours) counts as outside: dropping an object from the cache without taking it
        for deleted is always safe (the next listing or event brings it back)."""
        ring = self._rings.get(selector)
        uid = cache.uid(key)
        return ring is None or uid is None or ring.owner(uid) != self.identity
