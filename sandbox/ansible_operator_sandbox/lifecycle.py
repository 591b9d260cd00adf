"""Deletion the way Kubernetes does it: finalizers, garbage collection, namespace and CRD teardown.

* An object with finalizers is not removed: it gets ``deletionTimestamp`` (grace 0, generation + 1) and
  stays, visible to watchers as MODIFIED, until the last finalizer is removed; then it is DELETED.
* Propagation: ``Background`` (default) removes the owner now and its dependents right after;
  ``Foreground`` gives the owner the ``foregroundDeletion`` finalizer until its dependents are gone;
  ``Orphan`` strips the owner's ownerReference from dependents first.
* The garbage collector removes a dependent only when none of its owners exists any more; dangling
  references to gone owners are dropped from dependents that still have a live owner.
* A deleted Namespace turns ``Terminating``, all its objects are deleted (honouring their finalizers)
  and it disappears when empty; a deleted CRD deletes all its custom resources, then stops being served.

Work that a real cluster does in controllers runs here as callbacks scheduled on the loop right after the
triggering write, so a request never recurses into unbounded cascades.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any, Callable

from ansible_operator_sandbox.resources import (
    CRD_GROUP_RESOURCE,
    NAMESPACE_GROUP_RESOURCE,
    Registry,
    ResourceType,
)
from ansible_operator_sandbox.store import Event, Key, Store
from ansible_operator_sandbox.timeutil import now_rfc3339

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"


class Lifecycle:
    """Deletion, garbage collection and teardown controllers over a :class:`Store`."""

    def __init__(self, registry: Registry, store: Store) -> None:
        self.registry = registry
        self.store = store
        self.loop: asyncio.AbstractEventLoop | None = None
        store.add_listener(self._on_event)

    # ---- scheduling ------------------------------------------------------------------------------
    def _soon(self, fn: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                fn(*args)
            except Exception:  # a controller bug must not kill the loop; it is logged and retried on change
                log.exception("sandbox lifecycle step %s failed", getattr(fn, "__name__", fn))
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon(run)
        else:
            run()

    def resume(self) -> None:
        """After a restart: finish teardowns that were in progress when the previous process stopped."""
        for key, obj in list(self.store.items(NAMESPACE_GROUP_RESOURCE)):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                self._soon(self._terminate_namespace, key[2])
        for key, obj in list(self.store.items(CRD_GROUP_RESOURCE)):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                self._soon(self._cleanup_crd, key)
        for _, obj in self.store.all_items():
            if FOREGROUND in ((obj.get("metadata") or {}).get("finalizers") or []):
                self._soon(self._foreground_progress, obj["metadata"].get("uid", ""))

    # ---- hooks -----------------------------------------------------------------------------------
    def on_create(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.group_resource == CRD_GROUP_RESOURCE:
            fins = obj["metadata"].setdefault("finalizers", [])
            if CRD_CLEANUP not in fins:
                fins.append(CRD_CLEANUP)

    def _on_event(self, ev: Event) -> None:
        meta = ev.obj.get("metadata") or {}
        if ev.group_resource == CRD_GROUP_RESOURCE:
            if ev.type == "DELETED":
                self.registry.remove_crd(meta.get("name", ""))
                spec = ev.obj.get("spec") or {}
                self.store.close_watchers_of(f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}")
            else:
                self.registry.set_crd(ev.obj)
        if ev.type != "DELETED":
            refs = meta.get("ownerReferences") or []
            if any(isinstance(r, dict) and not self.store.exists_uid(r.get("uid", "")) for r in refs):
                self._soon(self._dangling, (ev.group_resource, ev.namespace, meta.get("name", "")))
            return
        uid = meta.get("uid", "")
        if self.store.dependents(uid):
            self._soon(self._collect, uid)
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("uid"):
                self._soon(self._foreground_progress, ref["uid"])
        if ev.namespace:
            ns = self.store.peek((NAMESPACE_GROUP_RESOURCE, "", ev.namespace))
            if ns is not None and (ns.get("metadata") or {}).get("deletionTimestamp"):
                self._soon(self._namespace_done, ev.namespace)
        rtype = self.registry.storage_type(ev.group_resource)
        if rtype is not None and rtype.builtin:
            return
        for crd_key, crd in list(self.store.items(CRD_GROUP_RESOURCE)):
            spec = crd.get("spec") or {}
            if (crd.get("metadata") or {}).get("deletionTimestamp") and \
                    ev.group_resource == f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}":
                self._soon(self._crd_done, crd_key)

    # ---- delete ----------------------------------------------------------------------------------
    def delete(self, rtype: ResourceType, key: Key, policy: str) -> dict[str, Any]:
        """Start deleting ``key``; returns the object as it is afterwards (or its final state)."""
        obj = self.store.get(key)
        if obj is None:
            raise KeyError(key)
        meta = obj["metadata"]
        uid = meta.get("uid", "")
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan":
            self._orphan(uid)
        elif policy == "Foreground" and self.store.dependents(uid) and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        is_namespace = key[0] == NAMESPACE_GROUP_RESOURCE
        if not finalizers and not is_namespace:
            final = self.store.remove(key)
            assert final is not None
            return final
        if meta.get("deletionTimestamp"):
            if finalizers != list(meta.get("finalizers") or []):
                meta["finalizers"] = finalizers
                obj = self.store.put(key, obj)
            return copy.deepcopy(obj)
        meta["finalizers"] = finalizers
        if not finalizers:
            meta.pop("finalizers")
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = 0
        if meta.get("generation"):  # only kinds that keep a generation bump it (rest.BeforeDelete)
            meta["generation"] = int(meta["generation"]) + 1
        if is_namespace:
            obj.setdefault("status", {})["phase"] = "Terminating"
        stored = self.store.put(key, obj)
        if is_namespace:
            self._soon(self._terminate_namespace, key[2])
        elif key[0] == CRD_GROUP_RESOURCE:
            self._soon(self._cleanup_crd, key)
        elif FOREGROUND in finalizers:
            self._soon(self._foreground_start, uid)
        return copy.deepcopy(stored)

    def _delete_key(self, key: Key, policy: str = "Background") -> None:
        obj = self.store.peek(key)
        if obj is None:
            return
        if (obj.get("metadata") or {}).get("deletionTimestamp") and policy != "Foreground":
            return
        rtype = self.registry.storage_type(key[0])
        if rtype is None:  # kind no longer served (CRD gone): just drop it
            self.store.remove(key)
            return
        self.delete(rtype, key, policy)

    def _drop_finalizer(self, key: Key, finalizer: str) -> None:
        obj = self.store.get(key)
        if obj is None:
            return
        fins = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        if fins == list(obj["metadata"].get("finalizers") or []):
            return
        if fins:
            obj["metadata"]["finalizers"] = fins
        else:
            obj["metadata"].pop("finalizers", None)
        if obj["metadata"].get("deletionTimestamp") and not fins and key[0] != NAMESPACE_GROUP_RESOURCE:
            self.store.remove(key)
        else:
            self.store.put(key, obj)

    # ---- garbage collection ----------------------------------------------------------------------
    def _orphan(self, owner_uid: str) -> None:
        for key in self.store.dependents(owner_uid):
            obj = self.store.get(key)
            if obj is None:
                continue
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            self.store.put(key, obj)

    def _collect(self, owner_uid: str) -> None:
        """Background GC for dependents of a removed owner."""
        if self.store.exists_uid(owner_uid):
            return
        for key in self.store.dependents(owner_uid):
            obj = self.store.get(key)
            if obj is None:
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            live = [r for r in refs if self.store.exists_uid(r.get("uid", ""))]
            if live:
                if len(live) != len(refs):
                    obj["metadata"]["ownerReferences"] = live
                    self.store.put(key, obj)
            else:
                self._delete_key(key, "Background")

    def _dangling(self, key: Key) -> None:
        """An object whose owners do not exist (wrong uid, owner already gone): the GC deletes it, or just
        drops
        the dangling references when another owner is alive."""
        obj = self.store.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        live = [r for r in refs if isinstance(r, dict) and self.store.exists_uid(r.get("uid", ""))]
        if len(live) == len(refs):
            return
        if live:
            obj["metadata"]["ownerReferences"] = live
            self.store.put(key, obj)
        else:
            self._delete_key(key, "Background")

    def _foreground_start(self, owner_uid: str) -> None:
        for key in self.store.dependents(owner_uid):
            self._delete_key(key, "Background")
        self._foreground_progress(owner_uid)

    def _foreground_progress(self, owner_uid: str) -> None:
        key = self.store.key_of_uid(owner_uid)
        if key is None:
            return
        owner = self.store.peek(key)
        if owner is None or FOREGROUND not in ((owner.get("metadata") or {}).get("finalizers") or []):
            return
        if not self.store.dependents(owner_uid):
            self._drop_finalizer(key, FOREGROUND)

    # ---- namespaces ------------------------------------------------------------------------------
    def _terminate_namespace(self, namespace: str) -> None:
        for key in self.store.keys_in_namespace(namespace):
            self._delete_key(key, "Background")
        self._namespace_done(namespace)

    def _namespace_done(self, namespace: str) -> None:
        key = (NAMESPACE_GROUP_RESOURCE, "", namespace)
        ns = self.store.peek(key)
        if ns is None or not (ns.get("metadata") or {}).get("deletionTimestamp"):
            return
        if self.store.keys_in_namespace(namespace) or (ns.get("metadata") or {}).get("finalizers"):
            return
        self.store.remove(key)

    # ---- CRDs ------------------------------------------------------------------------------------
    def _crd_resource(self, crd_key: Key) -> str | None:
        crd = self.store.peek(crd_key)
        if crd is None:
            return None
        spec = crd.get("spec") or {}
        return f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}"

    def _cleanup_crd(self, crd_key: Key) -> None:
        gr = self._crd_resource(crd_key)
        if gr is None:
            return
        for key, _ in list(self.store.items(gr)):
            self._delete_key(key, "Background")
        self._crd_done(crd_key)

    def _crd_done(self, crd_key: Key) -> None:
        gr = self._crd_resource(crd_key)
        if gr is None:
            return
        if next(iter(self.store.items(gr)), None) is None:
            self._drop_finalizer(crd_key, CRD_CLEANUP)
