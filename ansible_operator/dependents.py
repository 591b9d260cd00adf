"""Dependent watches: re-reconcile a CR when something it owns is deleted or changed by someone else.

The owner proxy (:mod:`ansible_operator.owners`) reports each kind of object runs create; for each such
kind we run ONE watch (cluster-wide, or per watched namespace) -- not one per CR -- and map every event
back to its owners through ``ownerReferences`` (owner kinds we reconcile; a controller reference wins
when there is one) or, failing that, the ``operator-sdk/primary-resource*`` annotations.

Which events re-queue the owner, following Operator SDK's ``DependentPredicate``:

* ``DELETED`` -> yes (the role will recreate what it wants);
* ``MODIFIED`` -> only if something besides ``status``, ``metadata.resourceVersion`` and
  ``metadata.managedFields`` changed, so controllers updating a Deployment's status (or the sandbox's
  simulated controllers) cause no reconcile churn;
* ``ADDED`` -> no: the run that created the object is the cause, and the initial list after start-up or
  a re-list only records state (the CRs themselves are reconciled at start-up anyway).

Cluster-scoped dependents found only through the annotations are followed only with
``watchClusterScopedResources`` (``cluster_scoped=True``), as in Operator SDK.

Implementation: each watch is kopf's own list/watch stream (its ``infinite_watch``, through
:mod:`ansible_operator.kopfcompat`), the very code that watches the custom resources: it lists, watches from
the list's resourceVersion with bookmarks, lists again after ``410 Gone`` and retries failed requests with
``settings.networking.error_backoffs``, through kopf's session and credentials (the vault shared with
``kopf.operator``, re-filled by its login handler after a 401). What is ours is only what a dependent
watch decides: the owner mapping, the fingerprint, and the comparison of each relist with what we knew
(objects that vanished or changed during the gap produced no event). Each watch is an asyncio task, so
closing is prompt (cancellation closes kopf's open response) and events land on the loop where
``enqueue`` lives.
We keep per object only a fingerprint and its owners, not the object.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, cast

from ansible_operator import kopfcompat
from ansible_operator.kube import error_from_kopf
from ansible_operator.kubetypes import KubeObject, ObjectMeta
from ansible_operator.owners.injection import (
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    DependentKind,
)

log = logging.getLogger(__name__)

__all__ = ["DependentWatcher", "OwnerKey", "fingerprint", "owners_of", "should_enqueue"]

OwnerKey = tuple[str, str, "str | None", str]
"""(owner apiVersion, owner kind, owner namespace or None, owner name) -- the arguments of ``enqueue``."""

EnqueueFn = Callable[[str, str, "str | None", str], None]

_NEVER_WATCHED = frozenset({("", "Event"), ("events.k8s.io", "Event")})
"""Events a run records (k8s_event) get the owner for GC, but watching them would loop: every
re-recorded Event (count+1) would re-queue the owner, whose run records the Event again."""


# ---------------------------------------------------------------------------------------------------
# pure parts


def fingerprint(obj: KubeObject) -> str:
    """Digest of everything a change to which should re-queue the owner (see module docstring)."""
    trimmed = {k: v for k, v in obj.items() if k != "status"}
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    trimmed["metadata"] = meta
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True, separators=(",", ":"), default=str)
                          .encode()).hexdigest()


def should_enqueue(event_type: str, old_fingerprint: str | None, obj: KubeObject) -> bool:
    """DELETED always; MODIFIED when the fingerprint moved (or the object was unknown); never ADDED."""
    if event_type == "DELETED":
        return True
    if event_type == "MODIFIED":
        return old_fingerprint is None or old_fingerprint != fingerprint(obj)
    return False


@dataclass(frozen=True)
class OwnerKinds:
    """What we know about the kinds we reconcile: ``(group, kind)`` -> apiVersion and scope."""

    api_versions: Mapping[tuple[str, str], str]
    cluster_scoped: frozenset[tuple[str, str]] = frozenset()


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def owners_of(obj: KubeObject, kinds: OwnerKinds, *, follow_annotations: bool = True) -> set[OwnerKey]:
    """The owners of ``obj`` among the kinds we reconcile.

    ownerReferences first (only the controller reference when one of ours is marked ``controller``);
    an owner reference's namespace is the object's own, or none for cluster-scoped owner kinds. Without a
    matching reference, the primary-resource annotations (``<ns>/<name>`` and ``<Kind>.<group>``).
    """
    meta: ObjectMeta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or None
    refs = [
        r
        for r in (meta.get("ownerReferences") or [])
        if isinstance(r, dict)
        and (_group_of(str(r.get("apiVersion", ""))), r.get("kind")) in kinds.api_versions
        and r.get("name")
    ]
    controllers = [r for r in refs if r.get("controller")]
    chosen = controllers or refs
    found: set[OwnerKey] = set()
    for ref in chosen:
        gk = (_group_of(str(ref["apiVersion"])), str(ref["kind"]))
        found.add((str(ref["apiVersion"]), gk[1], None if gk in kinds.cluster_scoped else namespace,
                   str(ref["name"])))
    if found or not follow_annotations:
        return found
    annotations = meta.get("annotations") or {}
    type_ = annotations.get(ANNOTATION_PRIMARY_RESOURCE_TYPE)
    primary = annotations.get(ANNOTATION_PRIMARY_RESOURCE)
    if not type_ or not primary:
        return found
    kind, _, group = str(type_).partition(".")
    api_version = kinds.api_versions.get((group, kind))
    if api_version is None:
        return found
    owner_ns, sep, name = str(primary).rpartition("/")
    if not name:
        return found
    found.add((api_version, kind, owner_ns or None if sep else None, name))
    return found


# ---------------------------------------------------------------------------------------------------
# the watcher


class _KindWatch:
    """One dependent kind (in one namespace or all) through kopf's ``infinite_watch``; re-queues owners."""

    def __init__(self, watcher: "DependentWatcher", kind: DependentKind, namespace: str | None) -> None:
        self.watcher = watcher
        self.kind = kind
        self.namespace = namespace
        self.known: dict[str, tuple[str, frozenset[OwnerKey]]] = {}  # uid -> (fingerprint, owners)
        self._listing: dict[str, tuple[str, frozenset[OwnerKey], KubeObject]] = {}
        self.listings = 0
        """Completed listings (the first one, then one after each watch gap that ended in 410)."""
        self.synced = asyncio.Event()

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.kind.kind}.{self.kind.group or 'core'}/{self.kind.version}{where}"

    async def run(self) -> None:
        """kopf lists, watches from the list's resourceVersion with bookmarks, re-lists after ``410 Gone``
        and retries failed requests (``settings.networking.error_backoffs``); only what kopf gives up on
        (a request that kept failing, a watch ``ERROR``) reaches this loop, which starts kopf's stream again
        after the longest of those backoffs."""
        settings = self.watcher._settings
        kind = self.kind
        while True:
            try:
                await self.watcher._owner_kinds()
                self._listing.clear()
                async for item in kopfcompat.infinite_watch(
                        settings, group=kind.group, version=kind.version, plural=kind.plural, kind=kind.kind,
                        namespaced=kind.namespaced, namespace=self.namespace):
                    self._on_item(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network, 5xx, 403... that outlived kopf's retries: never die silently
                delay = _restart_delay(settings)
                typed = error_from_kopf(exc)
                log.warning("dependent watch %s: %s; retrying in %.0fs", self.describe(), typed or exc, delay)
                await asyncio.sleep(delay)

    def _on_item(self, item: Any) -> None:
        if kopfcompat.is_listed(item):
            self._listed()
            return
        if not isinstance(item, dict):
            return
        type_ = item.get("type")
        raw = item.get("object") or {}
        if type_ == "BOOKMARK" or not isinstance(raw, dict):
            return
        obj = cast(KubeObject, raw)  # JSON as kopf decoded it
        meta: ObjectMeta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if type_ is None:  # a listed object (kopf's convention); judged when the listing ends
            owners = self.watcher._owners(obj, self.kind)
            if uid and owners:  # the name only, for the log line of a change found by a relist
                self._listing[uid] = (fingerprint(obj), owners, {"metadata": {
                    "name": meta.get("name", ""), "namespace": meta.get("namespace", "")}})
            return
        previous = self.known.get(uid)
        owners = self.watcher._owners(obj, self.kind)
        if type_ == "DELETED":
            self.known.pop(uid, None)
            all_owners = owners | (previous[1] if previous else frozenset())
            if should_enqueue("DELETED", None, obj):
                self.watcher._enqueue(all_owners, "deleted", obj)
            return
        if type_ == "ADDED":
            if owners:
                self.known[uid] = (fingerprint(obj), owners)
            return
        if type_ == "MODIFIED":
            old_fp = previous[0] if previous else None
            interested = owners | (previous[1] if previous else frozenset())
            if interested and should_enqueue("MODIFIED", old_fp, obj):
                self.watcher._enqueue(interested, "modified", obj)
            if owners:
                self.known[uid] = (fingerprint(obj), owners)
            else:
                self.known.pop(uid, None)

    def _listed(self) -> None:
        """A listing ended (``Bookmark.LISTED``). The first one only records; a later one followed a watch
        gap: what changed or vanished meanwhile produced no event, so compare it with what we knew (as the
        intake does for the primary resources, see :meth:`ansible_operator.intake.WatchIntake.relisted`)."""
        listing, self._listing = self._listing, {}
        if self.listings:
            log.info("dependent watch %s: relisted after a watch gap (%d owned objects listed)",
                     self.describe(), len(listing))
            for uid, (fp, owners, obj) in listing.items():
                previous = self.known.get(uid)
                if previous is not None and previous[0] != fp:
                    self.watcher._enqueue(previous[1] | owners, "modified (re-list)", obj)
            for uid, (_, owners) in self.known.items():
                if uid not in listing:
                    self.watcher._enqueue(owners, "deleted during a watch gap (not in the relist)", None)
        self.known = {uid: (fp, owners) for uid, (fp, owners, _) in listing.items()}
        self.listings += 1
        self.synced.set()


def _restart_delay(settings: Any) -> float:
    """How long to wait before starting a stream kopf gave up on: its own longest retry backoff."""
    backoffs = settings.networking.error_backoffs
    if isinstance(backoffs, (int, float)):
        return float(backoffs)
    try:
        return float(max(backoffs))
    except (TypeError, ValueError):
        return 10.0


class DependentWatcher:
    """Watches each dependent kind once (not once per CR) and re-queues owners.

    ``settings`` and ``vault`` are kopf's (``kopf.OperatorSettings`` and the credentials vault given to
    ``kopf.operator(vault=...)``, see :func:`ansible_operator.kube.kopf_vault`): the watches are kopf's
    list/watch streams, authenticated (and re-authenticated after a 401) by kopf's login handler."""

    def __init__(self, enqueue: EnqueueFn, *, settings: Any, vault: Any,
                 owner_kinds: set[tuple[str, str]], cluster_scoped: bool,
                 namespaces: Iterable[str] = ()) -> None:
        """``namespaces``: watch only these (one watch per namespace for namespaced kinds); empty = all.

        Cluster-scoped kinds are always watched cluster-wide.
        """
        kopfcompat.check()
        self._enqueue_fn = enqueue
        self._settings = settings
        # kopf's API calls take their credentials from this context variable; kopf sets it in its own
        # tasks, ours (started from the owner proxy's handlers) get a context of their own with it set.
        self._context = contextvars.copy_context()
        kopfcompat.use_vault(self._context, vault)
        self._owner_gks = set(owner_kinds)
        self._cluster_scoped = cluster_scoped
        self._namespaces = tuple(sorted(set(namespaces)))
        self._kinds: OwnerKinds | None = None
        self._kinds_lock = asyncio.Lock()
        self._watches: dict[tuple[str, str, str, str | None], _KindWatch] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- public ---------------------------------------------------------------------------------------

    async def ensure(self, kind: DependentKind) -> None:
        """Start watching ``kind`` unless already watched; returns once the initial list is done.

        Does nothing when no watch has ``watchDependentResources`` (empty ``owner_kinds``).
        """
        if self._closed or not self._owner_gks:
            return
        if (kind.group, kind.kind) in _NEVER_WATCHED:
            return
        # A kind the operator also runs (a CR whose role creates CRs of a watched kind) is watched here
        # too, as the SDK's proxy does: the intake's stream runs the child, this one re-queues its owner.
        scopes: tuple[str | None, ...] = (
            self._namespaces if (kind.namespaced and self._namespaces) else (None,)
        )
        started: list[tuple[_KindWatch, asyncio.Task[None]]] = []
        for ns in scopes:
            key = (kind.group, kind.version, kind.plural, ns)
            if key in self._watches:
                continue
            watch = _KindWatch(self, kind, ns)
            self._watches[key] = watch
            task = asyncio.create_task(watch.run(), name=f"dependent-watch {watch.describe()}",
                                       context=self._context)
            self._tasks.append(task)
            started.append((watch, task))
            log.info("watching dependent resources %s", watch.describe())
        for watch, task in started:
            # Wait for the initial list so events right after ensure() are judged against it; stop waiting
            # if the watch ends (close()) or the list keeps failing (it keeps retrying in the background).
            synced = asyncio.ensure_future(watch.synced.wait())
            try:
                await asyncio.wait({synced, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            finally:
                synced.cancel()
            if not watch.synced.is_set() and not task.done():
                log.warning(
                    "dependent watch %s: initial list still pending (will keep trying)", watch.describe()
                )

    def on_dependent(self, kind: DependentKind) -> None:
        """Callback for ``OwnerProxy(on_dependent=...)``: schedule :meth:`ensure` (on the running loop).

        Keeps a reference to the scheduled task (asyncio only keeps weak ones) and logs its failure.
        """
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self.ensure(kind), name=f"dependent-ensure {kind.kind}")
        self._pending.add(task)
        task.add_done_callback(self._ensure_done)

    def _ensure_done(self, task: "asyncio.Task[None]") -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dependent watches: ensure failed: %s", task.exception())

    @property
    def watched(self) -> list[DependentKind]:
        return sorted({w.kind for w in self._watches.values()}, key=lambda k: (k.group, k.kind))

    async def close(self) -> None:
        """Cancel every watch (kopf closes its open responses on cancellation) and wait for them."""
        self._closed = True
        tasks = [*self._pending, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()
        self._tasks.clear()

    # -- internals ------------------------------------------------------------------------------------

    async def _get_json(self, path: str) -> dict[str, Any]:
        """GET through kopf's client (its session, credentials and retries); typed errors."""
        try:
            doc = await kopfcompat.get(path, self._settings, log)
        except Exception as exc:
            typed = error_from_kopf(exc)
            if typed is not None:
                raise typed from exc
            raise
        if not isinstance(doc, dict):
            raise ValueError(f"GET {path}: not a JSON object")
        return doc

    async def _owner_kinds(self) -> OwnerKinds:
        """Discover apiVersion and scope of the owner kinds (once; retried until it works)."""
        if self._kinds is not None:
            return self._kinds
        async with self._kinds_lock:
            if self._kinds is not None:
                return self._kinds
            versions: dict[tuple[str, str], str] = {}
            cluster: set[tuple[str, str]] = set()
            for group in sorted({g for g, _ in self._owner_gks}):
                try:
                    if group:
                        gdoc = await self._get_json(f"/apis/{group}")
                        preferred = (gdoc.get("preferredVersion") or {}).get("version")
                        order = [preferred] + [v.get("version") for v in gdoc.get("versions") or []]
                        gvs = [f"{group}/{v}" for v in dict.fromkeys(x for x in order if x)]
                    else:
                        gvs = ["v1"]
                    for gv in gvs:
                        doc = await self._get_json(f"/apis/{gv}" if group else f"/api/{gv}")
                        for res in doc.get("resources") or []:
                            gk = (group, res.get("kind"))
                            if "/" in str(res.get("name", "")) or gk not in self._owner_gks or gk in versions:
                                continue
                            versions[gk] = gv
                            if not res.get("namespaced"):
                                cluster.add(gk)
                except Exception as exc:  # the calling watch retries with backoff
                    raise RuntimeError(f"discovery of owner group {group!r} failed: {exc}") from exc
            for gk in self._owner_gks - versions.keys():
                log.warning("dependent watches: owner kind %s.%s not served by the API server", gk[1], gk[0])
            self._kinds = OwnerKinds(versions, frozenset(cluster))
            return self._kinds

    def _owners(self, obj: KubeObject, kind: DependentKind) -> frozenset[OwnerKey]:
        assert self._kinds is not None
        follow_annotations = kind.namespaced or self._cluster_scoped
        return frozenset(owners_of(obj, self._kinds, follow_annotations=follow_annotations))

    def _enqueue(self, owners: Iterable[OwnerKey], why: str, obj: KubeObject | None) -> None:
        meta: ObjectMeta = (obj or {}).get("metadata") or {}
        for api_version, kind, namespace, name in sorted(
            owners, key=lambda o: (o[0], o[1], o[2] or "", o[3])
        ):
            dependent_ns = meta.get("namespace")
            what = f" {dependent_ns + '/' if dependent_ns else ''}{meta['name']}" if meta.get("name") else ""
            log.info("re-queue %s %s/%s: dependent%s %s", kind, namespace or "", name, what, why)
            try:
                self._enqueue_fn(api_version, kind, namespace, name)
            except Exception:
                log.exception("dependent watches: enqueue(%s %s/%s) failed", kind, namespace or "", name)
