"""Event intake: kopf watch streams → an object cache → work-queue keys.

kopf gives us robust list+watch streams (re-listing, reconnects, namespace and CRD discovery) but,
by design, none of a controller's semantics: it hands over every event, has no generation gating,
no coalescing, no resync. So we register one low-level ``on.event`` handler per watch, at runtime,
and do the deciding here:

* every event updates the :class:`ObjectCache` (what reconcile reads: always the latest object);
* only changes that matter enqueue the object: first sight, a generation change (objects without a
  generation: any change outside ``status`` and bookkeeping metadata), deletion starting, annotations
  when the watch has ``watchAnnotationsChanges``, and the label selector starting to match;
* the runner's own writes (status, finalizers) therefore never re-trigger a run;
* these are a user's changes: they enter the queue as :attr:`~ansible_operator.queue.Priority.USER`, ahead
  of resyncs and dependent echoes, except at start-up (see below).

Start-up (``startup_resync``): the first listing after a start shows every object for the first time.
Unconverged ones (:func:`ansible_operator.status.converged`: no ``Successful`` condition at the current
generation, a deletion, our finalizer missing) are queued at once, as user changes. Converged ones:

* ``"background"`` (the default): queued at once as background keys, behind every user change. Each is
  still re-run soon after a start, as the Operator SDK does -- an operator upgrade that changes a role
  applies it to every object -- but new and edited objects no longer wait behind them;
* ``"spread"`` (for thousands of objects): each is re-checked at a uniformly random time within its
  reconcile period, as a background key, so a restart neither runs thousands of no-op runs at once nor
  makes them all resync together afterwards; without a reconcile period (0) there is nothing to spread
  over, and they are queued at once as background keys;
* ``"immediate"``: everything at start-up, in listing order, as the Operator SDK does.

Dependent watches start when a run touches an owned kind (``dependents.py``); the Operator SDK gets them
back after a restart because every object runs at start-up (here too, by default). With ``"spread"``, the
first converged object of a watch with ``watchDependentResources`` is queued at once (as background): its
run re-establishes the watches of the kinds its role manages (the same for every object of the kind, in
the common case); kinds only some objects create come back as those objects are re-checked or changed.

The cache is uid-aware, like client-go's informer store: a name's identity is its ``metadata.uid``.
An object deleted and re-created with the same name is a *new* object (first sight: it runs even if
its generation equals the old one's), and the old one is forgotten (queue state, Events, artifacts).
A ``DELETED`` event of an old uid never removes a newer object of the same name, and a late event of a
uid already known to be gone (a tombstone) never resurrects it.

The stream: kopf runs the list/watch streams (namespaces, discovery, reconnects, relists), and the intake
takes each raw event straight from them, in stream order (:func:`install_stream_hook`, in
:mod:`ansible_operator.kopfcompat`, the one module that touches kopf's internals): kopf's per-object
machinery, a worker task and a memory per object before an ``on.event`` handler is called, cost more
than the intake itself at start-up with thousands of objects. The ``on.event`` handler each watch
registers is what makes kopf watch the resource; it handles an event only if the hook did not take it.

Relists: after a watch ends in ``410 Gone`` kopf lists again, but hands over only what the list holds:
objects deleted during the gap produce no event at all. Like the informer's ``Replace``, every listing
is compared with the cache when it ends (:meth:`WatchIntake.relisted`), after its objects were taken
in: a cached object the listing does not hold (same name and uid) was deleted during the gap and is
forgotten as if ``DELETED`` had arrived.

The intake does no I/O and never blocks: it just records and enqueues.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import random
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, cast

import kopf

from ansible_operator import kopfcompat
from ansible_operator.kubetypes import KubeObject, ObjectMeta
from ansible_operator.queue import ObjectKey, Priority, WorkQueue
from ansible_operator.status import converged
from ansible_operator.watches import Watch, annotation_overrides

log = logging.getLogger(__name__)

_BOOKKEEPING_METADATA = ("resourceVersion", "managedFields", "generation", "finalizers")


@dataclass(frozen=True)
class Fingerprint:
    """What, of an object, decides whether a new event is worth a run."""

    generation: int | None
    content: str | None
    """Hash of everything but status and bookkeeping metadata; only for objects without a generation."""
    annotations: str | None
    """Hash of annotations; only when the watch reacts to annotation changes."""
    deleting: bool
    selected: bool


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(obj: KubeObject, *, watch_annotations: bool, selected: bool) -> Fingerprint:
    meta: ObjectMeta = obj.get("metadata") or {}
    generation = meta.get("generation")
    content = None
    if generation is None:
        stripped = {k: v for k, v in obj.items() if k != "status"}
        stripped["metadata"] = {k: v for k, v in meta.items() if k not in _BOOKKEEPING_METADATA}
        content = _digest(stripped)
    annotations = _digest(_meaningful_annotations(meta)) if watch_annotations else None
    return Fingerprint(generation, content, annotations, bool(meta.get("deletionTimestamp")), selected)


def _meaningful_annotations(meta: ObjectMeta) -> dict[str, str]:
    # kubectl's client-side-apply bookkeeping changes with the spec; it carries no new intent of its own.
    annotations = dict(meta.get("annotations") or {})
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return annotations


def needs_run(previous: Fingerprint | None, current: Fingerprint) -> bool:
    """Decide from two fingerprints whether the change is one a role must see."""
    if not current.selected:
        return False
    if previous is None or not previous.selected:
        return True  # first sight (initial listing after a start) or it just started to match
    if current.deleting and not previous.deleting:
        return True
    if current.generation != previous.generation:
        return True
    if current.content != previous.content:
        return True
    return current.annotations != previous.annotations


ListingObserver = Callable[[str | None, frozenset[tuple[ObjectKey, str | None]]], None]
"""Called with (namespace or None for all, {(key, uid), ...}) after each complete listing."""


def uid_of(obj: KubeObject) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


class ObjectCache:
    """The latest body of every object of one watch, as the watch stream delivered it, with the
    fingerprint intake decided on. Reconcile reads from it; only intake writes."""

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, KubeObject] = {}
        self._fingerprints: dict[ObjectKey, Fingerprint] = {}
        self._listing_observers: list[ListingObserver] = []

    def observe_listings(self, fn: ListingObserver) -> None:
        """Call ``fn(namespace, {(key, uid), ...})`` each time a complete listing of ``namespace`` (None: all)
        has been applied: the full set of objects that existed then (e.g. to drop leftovers of others)."""
        self._listing_observers.append(fn)

    def listed(self, namespace: str | None, present: frozenset[tuple[ObjectKey, str | None]]) -> None:
        for fn in self._listing_observers:
            try:
                fn(namespace, present)
            except Exception:  # an observer must never break the watch stream
                log.exception("listing observer failed")

    def get(self, key: ObjectKey) -> KubeObject | None:
        obj = self._objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, key: ObjectKey) -> KubeObject | None:
        """The cached body itself, not a copy: for reading only."""
        return self._objects.get(key)

    def uid(self, key: ObjectKey) -> str | None:
        obj = self._objects.get(key)
        return uid_of(obj) if obj is not None else None

    def __len__(self) -> int:
        return len(self._objects)

    def keys(self) -> list[ObjectKey]:
        return list(self._objects)

    def fingerprint(self, key: ObjectKey) -> Fingerprint | None:
        return self._fingerprints.get(key)

    def store(self, key: ObjectKey, obj: KubeObject, fp: Fingerprint) -> None:
        self._objects[key] = obj
        self._fingerprints[key] = fp

    def remove(self, key: ObjectKey) -> None:
        self._objects.pop(key, None)
        self._fingerprints.pop(key, None)


def object_key(obj: KubeObject) -> ObjectKey:
    meta: ObjectMeta = obj.get("metadata") or {}
    return ObjectKey(namespace=meta.get("namespace") or None, name=meta["name"])


STARTUP_RESYNC = ("background", "spread", "immediate")
"""``--startup-resync``: how converged objects are re-checked at start-up (see the module docstring)."""


def startup_delay(watch: Watch, obj: KubeObject, *, mode: str, rng: random.Random) -> float | None:
    """When an object first seen in the start-up listing runs: None = now, as a user change (unconverged,
    or ``mode`` "immediate"); else after this many seconds (0: now), as background work."""
    if mode == "immediate" or not converged(obj):
        return None
    meta = obj.get("metadata") or {}
    finalizer = watch.finalizer
    if finalizer and finalizer.name not in (meta.get("finalizers") or []):
        return None  # the finalizer still has to be added: a run is due
    if mode == "background":
        return 0.0
    period = annotation_overrides(watch, meta.get("annotations"))["reconcile_period"]
    return rng.uniform(0.0, period) if period else 0.0


class ShardFilter(Protocol):
    """With server-side shard filtering (:mod:`ansible_operator.sharding.serverside`): what the API server
    leaves out of this replica's watch is not deleted."""

    def outside(self, key: ObjectKey, selector: str) -> bool:
        """The cached object is outside the shard a listing's selector asked for: it moved away."""

    def left(self, obj: KubeObject, gone: Callable[[], None]) -> bool:
        """A ``DELETED`` event that may be the object leaving the watch's label selector (its label
        changed): if True, ``gone()`` is called should it turn out deleted after all."""

    def seen(self, obj: KubeObject) -> None:
        """Every object that arrives (a wrong shard label gets corrected)."""


_TOMBSTONES = 10_000
"""How many uids of deleted objects intake remembers, to drop late events about them."""


class WatchIntake:
    """Intake for one watch: fed by kopf, feeding one work queue."""

    def __init__(self, watch: Watch, queue: WorkQueue, *, cache: ObjectCache | None = None,
                 selector: Callable[[dict[str, str]], bool] | None = None,
                 on_forget: Callable[[ObjectKey, KubeObject], None] | None = None,
                 startup_resync: str = "background", rng: random.Random | None = None) -> None:
        if startup_resync not in STARTUP_RESYNC:
            raise ValueError(f"startup_resync must be one of {', '.join(STARTUP_RESYNC)}"
                             f" (got {startup_resync!r})")
        self.watch = watch
        self.startup_resync = startup_resync
        self._rng = rng or random.Random()
        self.queue = queue
        self.cache = cache if cache is not None else ObjectCache()
        self._selector = selector
        self._on_forget = on_forget
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        self.relists = 0
        """Listings after the first one per namespace (each followed a watch gap); for metrics and tests."""
        self._listed_once: set[str | None] = set()
        self._dependents_recovered = False
        """A converged object was queued at once at start-up to bring the dependent watches back."""
        self.shards: ShardFilter | None = None
        """With server-side shard filtering: which missing objects moved to another replica."""

    def handle(self, event_type: str | None, obj: KubeObject) -> None:
        """Apply one watch event. ``event_type`` None is kopf's initial listing."""
        key = object_key(obj)
        uid = uid_of(obj)
        if event_type == "DELETED":
            cached_uid = self.cache.uid(key)
            if self.shards is not None and (cached_uid is None or uid is None or cached_uid == uid) \
                    and self.shards.left(obj, functools.partial(self._deleted_after_all, key, obj)):
                self.cache.remove(key)
                self.queue.forget(key)
                log.debug("%s %s: left this replica's watch (deleted, or its shard label changed)",
                          self.watch.kind, key)
                return
            if uid is not None:
                self._bury(uid)
            if cached_uid is None or uid is None or cached_uid == uid:
                self._forget(key, "deleted")
            # else: a late DELETED of an older object with this name; the cached (newer) one stays
            return
        if uid is not None and uid in self._tombstones:
            log.debug("ignoring a late %s event of %s (uid %s is gone)", event_type or "listing", key, uid)
            return
        cached_uid = self.cache.uid(key)
        if cached_uid is not None and uid is not None and cached_uid != uid:
            # Deleted and re-created under the same name while we were not looking: a new object.
            self._bury(cached_uid)
            self._forget(key, f"replaced by a new object (uid {uid})")
        if self.shards is not None:
            self.shards.seen(obj)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        selected = self._selector(labels) if self._selector else True
        current = fingerprint(obj, watch_annotations=self.watch.watch_annotations_changes, selected=selected)
        previous = self.cache.fingerprint(key)
        self.cache.store(key, obj, current)
        if not needs_run(previous, current):
            return
        delay = None
        if event_type is None and previous is None:  # first sight, in a listing: start-up
            delay = startup_delay(self.watch, obj, mode=self.startup_resync, rng=self._rng)
            if delay and self.watch.watch_dependent_resources and not self._dependents_recovered:
                self._dependents_recovered = True
                delay = 0.0  # see the module docstring: one run brings the dependent watches back
        if delay is None:
            self.queue.add(key, Priority.USER)
        elif delay <= 0:
            self.queue.add(key, Priority.BACKGROUND)
        else:
            log.debug("%s %s: converged; re-checking it in %.0fs", self.watch.kind, key, delay)
            self.queue.add_after(key, delay, Priority.BACKGROUND)

    def relisted(self, namespace: str | None, listed: Iterable[tuple[str | None, str, str | None]],
                 shard: str | None = None) -> int:
        """A listing of ``namespace`` (None: all) ended, holding these (namespace, name, uid); ``shard``: the
        shard selector it was made with (``shardSelector``, or a shard label selector). Cached objects it
        does not hold were deleted meanwhile: forget them (informer ``Replace``), except those outside the
        listing's shard, which moved to another
        replica (dropped from the cache, never taken for deleted). Returns how many were deleted."""
        present = frozenset((ObjectKey(namespace=ns or None, name=name), uid) for ns, name, uid in listed)
        if namespace in self._listed_once:
            self.relists += 1
            log.info("%s: relisted%s (%d objects listed%s)", self.watch.key,
                     f" namespace {namespace}" if namespace else "", len(present),
                     ", a new shard" if shard else "")
        self._listed_once.add(namespace)
        gone = moved = 0
        for key in self.cache.keys():
            if namespace is not None and key.namespace != namespace:
                continue
            uid = self.cache.uid(key)
            if (key, uid) in present:
                continue
            if shard is not None and self.shards is not None and self.shards.outside(key, shard):
                self.cache.remove(key)
                self.queue.forget(key)
                moved += 1
                continue
            if uid is not None:
                self._bury(uid)
            self._forget(key, "deleted during a watch gap (not in the relist)")
            gone += 1
        if gone:
            log.info("%s: relist%s found %d object(s) deleted during the watch gap", self.watch.key,
                     f" of namespace {namespace}" if namespace else "", gone)
        if moved:
            log.info("%s: %d object(s) left this replica's shard", self.watch.key, moved)
        self.cache.listed(namespace, present)
        return gone

    def _deleted_after_all(self, key: ObjectKey, old: KubeObject) -> None:
        """An object that left the watch (see :meth:`ShardFilter.left`) was deleted: forget it, unless it
        came back meanwhile."""
        uid = uid_of(old)
        if uid is not None:
            self._bury(uid)
        if self.cache.uid(key) not in (None, uid):
            return  # a new object of that name
        self.cache.remove(key)
        self.queue.forget(key)
        log.debug("%s %s: deleted", self.watch.kind, key)
        if self._on_forget:
            self._on_forget(key, old)

    def _bury(self, uid: str) -> None:
        self._tombstones[uid] = None
        self._tombstones.move_to_end(uid)
        while len(self._tombstones) > _TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _forget(self, key: ObjectKey, why: str) -> None:
        old = self.cache.get(key)
        self.cache.remove(key)
        self.queue.forget(key)
        if old is None:
            return
        finalizer = self.watch.finalizer
        old_meta = old.get("metadata") or {}
        if (why != "deleted" and finalizer and finalizer.name in (old_meta.get("finalizers") or [])
                and not old_meta.get("deletionTimestamp")):
            # Our finalizer blocks deletion until we remove it, and we only do that after a finalizer run,
            # which needs the deletion to have been seen. Never seen, yet gone: someone removed it by hand.
            log.warning("%s %s: %s while its finalizer %s was still set: someone else removed it, so the "
                        "finalizer run did not happen", self.watch.kind, key, why, finalizer.name)
        else:
            log.debug("%s %s: %s", self.watch.kind, key, why)
        if self._on_forget:
            self._on_forget(key, old)

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Register this watch's kopf handler (no code per CR kind: the same function for all)."""

        async def on_event(event: dict[str, Any], **_: Any) -> None:
            # only what the stream hook did not take (it takes every event of a registered intake)
            body = event.get("object")
            if isinstance(body, dict):
                self.deliver(event.get("type"), copy.deepcopy(body))  # kopf's body: its own

        handler: Any = on_event  # kopf's WatchingFn protocol spells out every kwarg; we take two
        kopf.on.event(
            group=self.watch.group, version=self.watch.version, kind=self.watch.kind,
            id=f"intake/{self.watch.key}", registry=registry,
        )(handler)
        install_stream_hook()
        w = self.watch
        refs = _LISTENERS.setdefault((w.group, w.version, w.kind), [])
        refs[:] = [*(r for r in refs if r() is not None), weakref.ref(self)]

    def deliver(self, event_type: str | None, body: dict[str, Any]) -> None:
        """One raw event of the stream; never raises (a failure is logged: the stream goes on)."""
        if not (body.get("metadata") or {}).get("name"):
            return
        try:
            self.handle(event_type, cast(KubeObject, body))
        except Exception:
            log.exception("%s: could not take in a %s event", self.watch.key, event_type or "listing")


# ---- kopf's streams: events and listings, as they arrive ---------------------------------------------

_LISTENERS: dict[tuple[str, str, str], list[weakref.ref[WatchIntake]]] = {}
"""The registered intakes of each (group, version, kind); weak, so that an intake no longer used (a test's,
a stopped operator's) gets nothing."""


def _intakes_of(gvk: tuple[str, str, str]) -> list[WatchIntake]:
    return [intake for ref in _LISTENERS.get(gvk, ()) if (intake := ref()) is not None]


def _deliver(gvk: tuple[str, str, str], event_type: str | None, body: dict[str, Any]) -> bool:
    intakes = _intakes_of(gvk)
    for n, intake in enumerate(intakes):  # the body is this stream's own: a copy for each further intake
        intake.deliver(event_type, body if n == len(intakes) - 1 else copy.deepcopy(body))
    return bool(intakes)


def _listing_ended(gvk: tuple[str, str, str], namespace: str | None,
                   listed: list[tuple[str | None, str, str | None]], shard: str | None) -> None:
    for intake in _intakes_of(gvk):
        intake.relisted(namespace, listed, shard)


def install_stream_hook() -> None:
    """Have kopf's streams hand every event of a resource to its intakes, and report every listing that
    completes (a wrapper around kopf's ``continuous_watch``, in
    :func:`ansible_operator.kopfcompat.install_stream_hook`). Idempotent."""
    kopfcompat.install_stream_hook(_listing_ended, _deliver)
