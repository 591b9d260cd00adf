"""``run --sharding --shard-label``: the replicas label the objects with their bucket themselves.

A replica's watches see only the buckets it owns (:mod:`.serverside`), so an object without the label (a
new one, or one from before ``--shard-label``) reaches nobody's watch. Each replica therefore lists the
objects without a valid bucket label (``ansible-operator.dev/shard-bucket notin (00,…,ff)``, served from
the API server's watch cache: normally an empty answer) every ``interval`` and labels those the current
ring gives it; the labelled object then arrives in its watch as new. An object carrying another bucket
than its own is labelled again when the replica whose bucket it names sees it (:meth:`request`). One
owner per object: each is labelled once, by the replica that will run it; if that replica dies first, the
next ring's owner labels it.

A watch with a label selector reports an object whose label changed as ``DELETED``, with the object as it
was before: the labeller tells those from deletions by asking (:meth:`ShardLabeller.verify`).

A label's value follows from the object's uid (or namespace), so two replicas briefly disagreeing about a
ring write the same value: no precondition is needed. API calls go through :class:`~ansible_operator.kube.
Kube` (its retry policy); a failed sweep is retried at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ansible_operator.kube import ApiError, Kube, NotFound, ResourceRef
from ansible_operator.kubetypes import KubeObject
from ansible_operator.sharding.ring import HashRing
from ansible_operator.sharding.serverside import SHARD_LABEL, BucketLabels

__all__ = ["ShardLabeller"]

log = logging.getLogger(__name__)


class ShardLabeller:
    """Labels one watched kind's objects with their bucket, those the current ring gives ``identity``."""

    def __init__(self, kube: Kube, ref: Callable[[], Any], scopes: list[str | None], labels: BucketLabels,
                 *, identity: str, ring: Callable[[], HashRing | None], interval: float) -> None:
        """``ref``: a coroutine function finding the kind's :class:`ResourceRef` (discovery); ``scopes``: the
        namespaces watched (None: all)."""
        self._kube = kube
        self._find_ref = ref
        self.scopes = scopes
        self.labels = labels
        self.identity = identity
        self._ring = ring
        self.interval = interval
        self._requested: dict[tuple[str | None, str], KubeObject] = {}
        self._verify: dict[tuple[str | None, str], tuple[KubeObject, Callable[[], None]]] = {}
        self._wake = asyncio.Event()
        self.labelled = 0
        """Objects labelled by this replica (for tests and logs)."""
        self._failing = False

    def request(self, obj: KubeObject) -> None:
        """Label ``obj`` with its own bucket soon (it carries another). Called on the event loop."""
        meta = obj.get("metadata") or {}
        if meta.get("name"):
            self._requested[(meta.get("namespace"), str(meta["name"]))] = obj
            self._wake.set()

    def verify(self, obj: KubeObject, gone: Callable[[], None]) -> None:
        """Call ``gone()`` soon if ``obj`` no longer exists (its uid): it left a watch, deleted or relabelled.
        Called on the event loop."""
        meta = obj.get("metadata") or {}
        if meta.get("name"):
            self._verify[(meta.get("namespace"), str(meta["name"]))] = (obj, gone)
            self._wake.set()

    async def run(self) -> None:
        """Until cancelled."""
        ref: ResourceRef | None = None
        while True:
            try:
                if ref is None:
                    ref = await self._find_ref()
                await self._sweep(ref)
                if self._failing:
                    log.info("shard labels of %s: labelling again", ref.plural)
                self._failing = False
            except ApiError as exc:
                if not self._failing:
                    log.warning("shard labels: %s (trying again every %gs)", exc, self.interval)
                self._failing = True
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _sweep(self, ref: ResourceRef) -> None:
        while self._verify:
            where, (obj, gone) = next(iter(self._verify.items()))
            await self._check(ref, obj, gone)
            if self._verify.get(where, (None, None))[0] is obj:
                del self._verify[where]
        requested, self._requested = self._requested, {}
        for obj in requested.values():
            await self._label(ref, obj, why="carried another bucket")
        ring = self._ring()
        if ring is None or self.identity not in ring:
            return
        for scope in self.scopes:
            listing = await self._kube.request("GET", ref.path(scope), query=[
                ("labelSelector", self.labels.unlabelled_selector()), ("resourceVersion", "0")])
            for obj in (listing or {}).get("items") or []:
                if self.labels.owner(ring, obj) == self.identity:
                    await self._label(ref, obj, why="new")

    async def _check(self, ref: ResourceRef, obj: KubeObject, gone: Callable[[], None]) -> None:
        meta = obj.get("metadata") or {}
        found = await self._kube.get(ref, meta.get("namespace"), str(meta["name"]))
        if found is None or (found.get("metadata") or {}).get("uid") != meta.get("uid"):
            gone()

    async def _label(self, ref: ResourceRef, obj: KubeObject, why: str) -> None:
        expected = self.labels.expected(obj)
        meta = obj.get("metadata") or {}
        if expected is None or self.labels.carried(obj) == expected:
            return
        patch = {"metadata": {"uid": meta.get("uid"), "labels": {SHARD_LABEL: expected}}}
        try:
            await self._kube.merge_patch(ref, meta.get("namespace"), str(meta["name"]), patch)
        except NotFound:
            return  # deleted meanwhile
        except ApiError as exc:
            if exc.status in (409, 422):  # the uid in the patch differs: the name is a new object's now
                return
            raise
        self.labelled += 1
        log.debug("shard labels: %s/%s (%s) is in bucket %s", meta.get("namespace") or "", meta["name"],
                  why, expected)
