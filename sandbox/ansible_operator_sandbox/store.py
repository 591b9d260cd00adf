"""Object storage for the sandbox: current objects, one cluster-wide resourceVersion, watch fan-out.

Why it looks like this:

* Everything runs on one asyncio loop, so a write and the fan-out of its event are atomic with respect to
  other requests: a watcher registered "from resourceVersion N" gets exactly the history after N and then
  every later event, with no gap and no duplicate.
* Stored objects are never mutated in place (writes replace the dict), so events can share them with
  every watcher; each event caches its JSON encoding per apiVersion so 20 watchers cost one ``dumps``.
* The history is bounded (like etcd compaction): a watch from an older resourceVersion gets 410 Gone.
* Each watcher has a bounded queue; a watcher that falls too far behind is closed (the client re-lists),
  so one slow client never blocks the writers or the other watchers.
* With a data directory every write goes to SQLite (objects and the resourceVersion counter), so a
  restarted sandbox continues with the same objects and a monotonic resourceVersion.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (group/resource, namespace or "", name)

HISTORY_LIMIT = 10_000
WATCH_QUEUE_LIMIT = 50_000


class TooOldResourceVersion(Exception):
    """The requested resourceVersion is older than the retained history (→ 410 Gone)."""

    def __init__(self, requested: int, oldest: int, compacted: bool = False) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest
        self.compacted = compacted
        """Gone by :meth:`Store.compact` (as by an etcd compaction) rather than out of the history's window
        (as out of the watch cache's): the real server words the two differently."""


@dataclass
class Event:
    """One change. ``old`` is the previous state (for selector transitions), None on ADDED."""

    type: str
    group_resource: str
    namespace: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    rv: int
    _encoded: dict[tuple[str, str], bytes] = field(default_factory=dict, repr=False)

    def encoded(self, event_type: str, api_version: str) -> bytes:
        """The watch line for this event as served for ``api_version`` (cached: shared by all watchers)."""
        key = (event_type, api_version)
        data = self._encoded.get(key)
        if data is None:
            obj = self.obj
            if obj.get("apiVersion") != api_version:
                obj = dict(obj)
                obj["apiVersion"] = api_version
            data = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"
            self._encoded[key] = data
        return data


@dataclass(eq=False)
class Watcher:
    """One open watch stream: which events it wants and the queue they are delivered through."""

    group_resource: str
    namespace: str | None
    accept: Callable[[dict[str, Any]], bool] | None = None
    queue: asyncio.Queue[Event | None] = field(default_factory=lambda: asyncio.Queue(WATCH_QUEUE_LIMIT))
    overflowed: bool = False

    def wants(self, ev: Event) -> bool:
        return ev.group_resource == self.group_resource and (
            self.namespace is None or ev.namespace == self.namespace)


class Store:
    """Current objects keyed by (group/resource, namespace, name), the RV counter, history and watchers."""

    def __init__(self, data_dir: str | Path | None = None) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._by_resource: dict[str, dict[Key, dict[str, Any]]] = collections.defaultdict(dict)
        self._by_uid: dict[str, Key] = {}
        self._dependents: dict[str, set[Key]] = collections.defaultdict(set)  # owner uid -> dependents
        self._rv = 0
        self._history: collections.deque[Event] = collections.deque(maxlen=HISTORY_LIMIT)
        self._compacted = 0  # every event with rv > _compacted is in history
        self._etcd_compacted = 0  # the last compact(): resourceVersions before it are gone from "etcd" too
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Event], None]] = []
        self._db: sqlite3.Connection | None = None
        if data_dir is not None:
            self._open_db(Path(data_dir))
        self._compacted = self._rv

    # ---- persistence -----------------------------------------------------------------------------
    def _open_db(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(data_dir / "sandbox.sqlite3"), isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE IF NOT EXISTS objects (gr TEXT, ns TEXT, name TEXT, body TEXT,"
                   " PRIMARY KEY (gr, ns, name))")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        row = db.execute("SELECT value FROM meta WHERE key='rv'").fetchone()
        self._rv = int(row[0]) if row else 0
        for gr, ns, name, body in db.execute("SELECT gr, ns, name, body FROM objects"):
            self._index((gr, ns, name), json.loads(body))
        self._db = db

    def _persist(self, key: Key, obj: dict[str, Any] | None) -> None:
        if self._db is None:
            return
        with self._db:  # one transaction: object and counter move together
            if obj is None:
                self._db.execute("DELETE FROM objects WHERE gr=? AND ns=? AND name=?", key)
            else:
                self._db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)",
                                 (*key, json.dumps(obj, separators=(",", ":"))))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(self._rv),))

    def close(self) -> None:
        for w in list(self._watchers):
            self.close_watcher(w)
        if self._db is not None:
            self._db.close()
            self._db = None

    # ---- indexes ---------------------------------------------------------------------------------
    def _index(self, key: Key, obj: dict[str, Any]) -> None:
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        self._by_resource[key[0]][key] = obj
        meta = obj.get("metadata") or {}
        if meta.get("uid"):
            self._by_uid[meta["uid"]] = key
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid"):
                self._dependents[ref["uid"]].add(key)

    def _unindex(self, key: Key, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if self._by_uid.get(meta.get("uid", "")) == key:
            del self._by_uid[meta["uid"]]
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid"):
                deps = self._dependents.get(ref["uid"])
                if deps is not None:
                    deps.discard(key)
                    if not deps:
                        del self._dependents[ref["uid"]]

    # ---- reads -----------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, key: Key) -> dict[str, Any] | None:
        """A deep copy (callers may modify it)."""
        obj = self._objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def peek(self, key: Key) -> dict[str, Any] | None:
        """The stored object itself: read-only, never modify."""
        return self._objects.get(key)

    def exists_uid(self, uid: str) -> bool:
        return uid in self._by_uid

    def key_of_uid(self, uid: str) -> Key | None:
        return self._by_uid.get(uid)

    def dependents(self, owner_uid: str) -> list[Key]:
        return sorted(self._dependents.get(owner_uid, ()))

    def items(
        self, group_resource: str, namespace: str | None = None
    ) -> Iterator[tuple[Key, dict[str, Any]]]:
        """Stored objects (read-only) of one resource, optionally one namespace, sorted by namespace/name."""
        objects = self._by_resource.get(group_resource, {})
        keys = sorted(k for k in objects if namespace is None or k[1] == namespace)
        for k in keys:
            obj = objects.get(k)
            if obj is not None:
                yield k, obj

    def all_items(self) -> list[tuple[Key, dict[str, Any]]]:
        """Every stored object (read-only), for one-off scans such as resuming teardowns after a restart."""
        return list(self._objects.items())

    def keys_in_namespace(self, namespace: str) -> list[Key]:
        return sorted(k for k in self._objects if k[1] == namespace)

    # ---- writes ----------------------------------------------------------------------------------
    def next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def put(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``key`` with ``obj`` (takes ownership), assigning a new resourceVersion."""
        old = self._objects.get(key)
        rv = self.next_rv()
        obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        self._index(key, obj)
        self._persist(key, obj)
        self._emit(Event("MODIFIED" if old is not None else "ADDED", key[0], key[1], obj, old, rv))
        return obj

    def remove(self, key: Key) -> dict[str, Any] | None:
        """Delete ``key``; the DELETED event carries the last state with a fresh resourceVersion."""
        old = self._objects.get(key)
        if old is None:
            return None
        rv = self.next_rv()
        final = dict(old)
        final["metadata"] = dict(old.get("metadata") or {}, resourceVersion=str(rv))
        self._unindex(key, old)
        del self._objects[key]
        self._by_resource[key[0]].pop(key, None)
        self._persist(key, None)
        self._emit(Event("DELETED", key[0], key[1], final, old, rv))
        return final

    def set_history_limit(self, limit: int) -> None:
        """Shrink or grow the retained watch history (tests use a small one to provoke 410 Gone)."""
        events = list(self._history)
        self._history = collections.deque(events[-limit:], maxlen=limit)
        if len(events) > limit:
            self._compacted = events[-limit - 1].rv

    def compact(self) -> int:
        """TEST-ONLY: drop the whole watch history, as an etcd compaction at the current revision does.

        Open watches keep streaming; any watch (re)started from an older resourceVersion gets 410 Gone, so
        a client that was disconnected must re-list. Nothing calls this except tests (the fault suite's
        watch-gap test, through an in-process sandbox): no flag, endpoint or signal exposes it. Returns the
        resourceVersion compacted at."""
        self._history.clear()
        self._compacted = self._etcd_compacted = self._rv
        return self._rv

    def too_old(self, resource_version: int) -> TooOldResourceVersion | None:
        """Why the history no longer reaches back to ``resource_version`` (None: it does)."""
        if resource_version >= self._compacted:
            return None
        return TooOldResourceVersion(resource_version, self._compacted + 1,
                                     compacted=resource_version < self._etcd_compacted)

    def items_at(self, group_resource: str, namespace: str | None, resource_version: int
                 ) -> list[tuple[Key, dict[str, Any]]]:
        """Objects of one resource as they were at ``resource_version`` (a list with
        ``resourceVersionMatch=Exact``): the current ones with the history after it undone. Raises
        TooOldResourceVersion when the history no longer reaches back that far."""
        error = self.too_old(resource_version)
        if error is not None:
            raise error
        state = dict(self.items(group_resource, namespace))
        for ev in reversed(self._history):
            if ev.rv <= resource_version:
                break
            if ev.group_resource != group_resource or (namespace is not None and ev.namespace != namespace):
                continue
            key = (group_resource, ev.namespace, str((ev.obj.get("metadata") or {}).get("name") or ""))
            if ev.old is None:
                state.pop(key, None)
            else:
                state[key] = ev.old
        return sorted(state.items())

    # ---- watch -----------------------------------------------------------------------------------
    def add_listener(self, fn: Callable[[Event], None]) -> None:
        """In-process subscribers (lifecycle, simulated controllers): called synchronously per event."""
        self._listeners.append(fn)

    def _emit(self, ev: Event) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(ev)
        for w in list(self._watchers):
            if w.wants(ev):
                self._deliver(w, ev)
        for fn in list(self._listeners):
            try:
                fn(ev)
            except Exception:  # a listener bug must not undo or interrupt a write that already happened
                log.exception("sandbox store listener %r failed on %s %s", fn, ev.type, ev.group_resource)

    def _deliver(self, w: Watcher, ev: Event) -> None:
        if w.overflowed:
            return
        try:
            w.queue.put_nowait(ev)
        except asyncio.QueueFull:
            # The client is too slow: end its stream (it will re-list and re-watch), as the real server does.
            w.overflowed = True
            self._watchers.discard(w)
            while not w.queue.empty():
                w.queue.get_nowait()
            w.queue.put_nowait(None)

    def watch(self, group_resource: str, namespace: str | None, since: int | None,
              accept: Callable[[dict[str, Any]], bool] | None = None) -> tuple[Watcher, list[Event]]:
        """Register a watcher; returns it and the history events after ``since`` (None: none).

        Raises TooOldResourceVersion when events after ``since`` are no longer retained.
        """
        replay: list[Event] = []
        if since is not None:
            error = self.too_old(since)
            if error is not None:
                raise error
            # history is ordered by rv: scan from the end (recent watches are the common case)
            for ev in reversed(self._history):
                if ev.rv <= since:
                    break
                if ev.group_resource == group_resource and (namespace is None or ev.namespace == namespace):
                    replay.append(ev)
            replay.reverse()
        w = Watcher(group_resource, namespace, accept)
        self._watchers.add(w)
        return w, replay

    def close_watcher(self, w: Watcher) -> None:
        if w in self._watchers:
            self._watchers.discard(w)
            try:
                w.queue.put_nowait(None)
            except asyncio.QueueFull:
                pass

    def close_watchers_of(self, group_resource: str) -> None:
        """End every watch on a resource that stopped being served (its CRD was deleted)."""
        for w in list(self._watchers):
            if w.group_resource == group_resource:
                self.close_watcher(w)

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)
