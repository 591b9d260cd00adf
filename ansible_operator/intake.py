"""Event intake: kopf watch streams → an object cache → work-queue keys.

kopf gives us robust list+watch streams (re-listing, reconnects, namespace and CRD discovery) but,
by design, none of a controller's semantics: it hands over every event, has no generation gating,
no coalescing, no resync. So we register one low-level ``on.event`` handler per watch, at runtime,
and do the deciding here:

* every event updates the :class:`ObjectCache` (what reconcile reads: always the latest object);
* only changes that matter enqueue the object: first sight, a generation change (objects without a
  generation: any change outside ``status`` and bookkeeping metadata), deletion starting, annotations
  when the watch has ``watchAnnotationsChanges``, and the label selector starting to match;
* the runner's own writes (status, finalizers) therefore never re-trigger a run.

The handler does no I/O and never blocks: it just records and enqueues.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

import kopf

from ansible_operator.queue import ObjectKey, WorkQueue
from ansible_operator.watches import Watch

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


def fingerprint(obj: dict[str, Any], *, watch_annotations: bool, selected: bool) -> Fingerprint:
    meta = obj.get("metadata") or {}
    generation = meta.get("generation")
    content = None
    if generation is None:
        stripped = {k: v for k, v in obj.items() if k != "status"}
        stripped["metadata"] = {k: v for k, v in meta.items() if k not in _BOOKKEEPING_METADATA}
        content = _digest(stripped)
    annotations = _digest(_meaningful_annotations(meta)) if watch_annotations else None
    return Fingerprint(generation, content, annotations, bool(meta.get("deletionTimestamp")), selected)


def _meaningful_annotations(meta: dict[str, Any]) -> dict[str, str]:
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


class ObjectCache:
    """The latest body of every object of one watch, as the watch stream delivered it, with the
    fingerprint intake decided on. Reconcile reads from it; only intake writes."""

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._fingerprints: dict[ObjectKey, Fingerprint] = {}

    def get(self, key: ObjectKey) -> dict[str, Any] | None:
        obj = self._objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def fingerprint(self, key: ObjectKey) -> Fingerprint | None:
        return self._fingerprints.get(key)

    def store(self, key: ObjectKey, obj: dict[str, Any], fp: Fingerprint) -> None:
        self._objects[key] = obj
        self._fingerprints[key] = fp

    def remove(self, key: ObjectKey) -> None:
        self._objects.pop(key, None)
        self._fingerprints.pop(key, None)


def object_key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(namespace=meta.get("namespace") or None, name=meta["name"])


class WatchIntake:
    """Intake for one watch: fed by kopf, feeding one work queue."""

    def __init__(self, watch: Watch, queue: WorkQueue, *, cache: ObjectCache | None = None,
                 selector: Callable[[dict[str, str]], bool] | None = None,
                 on_forget: Callable[[ObjectKey], None] | None = None) -> None:
        self.watch = watch
        self.queue = queue
        self.cache = cache if cache is not None else ObjectCache()
        self._selector = selector
        self._on_forget = on_forget

    def handle(self, event_type: str | None, obj: dict[str, Any]) -> None:
        """Apply one watch event. ``event_type`` None is kopf's initial listing."""
        key = object_key(obj)
        if event_type == "DELETED":
            self.cache.remove(key)
            self.queue.forget(key)
            if self._on_forget:
                self._on_forget(key)
            return
        labels = (obj.get("metadata") or {}).get("labels") or {}
        selected = self._selector(labels) if self._selector else True
        current = fingerprint(obj, watch_annotations=self.watch.watch_annotations_changes, selected=selected)
        previous = self.cache.fingerprint(key)
        self.cache.store(key, obj, current)
        if needs_run(previous, current):
            self.queue.add(key)

    def register(self, registry: kopf.OperatorRegistry) -> None:
        """Register this watch's kopf handler (no code per CR kind: the same function for all)."""

        async def on_event(event: dict[str, Any], **_: Any) -> None:
            body = event.get("object")
            if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
                return
            self.handle(event.get("type"), copy.deepcopy(body))

        kopf.on.event(
            group=self.watch.group, version=self.watch.version, kind=self.watch.kind,
            id=f"intake/{self.watch.key}", registry=registry,
        )(on_event)
