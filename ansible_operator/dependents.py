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

Implementation: each watch is an asyncio task speaking HTTP to the API server with aiohttp (list, then
watch from the list's resourceVersion with bookmarks; on ``410 Gone`` re-list and diff against what we
knew, turning vanished objects into deletions; on errors reconnect with capped exponential backoff).
An async task rather than a ``kubernetes.watch.Watch`` thread per kind because closing must be prompt
(a thread blocked in a socket read cannot be interrupted), the events land on the loop where ``enqueue``
lives, and the connection settings (TLS, auth, token refresh) are the very ones the proxy uses.
We keep per object only a fingerprint and its owners, not the object.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping
from urllib.parse import urlencode

from ansible_operator.owners import (
    ANNOTATION_PRIMARY_RESOURCE,
    ANNOTATION_PRIMARY_RESOURCE_TYPE,
    DependentKind,
    Upstream,
)

if TYPE_CHECKING:  # pragma: no cover
    import kubernetes.client
    from aiohttp import ClientSession

log = logging.getLogger(__name__)

__all__ = ["DependentWatcher", "OwnerKey", "fingerprint", "owners_of", "should_enqueue"]

OwnerKey = tuple[str, str, "str | None", str]
"""(owner apiVersion, owner kind, owner namespace or None, owner name) -- the arguments of ``enqueue``."""

EnqueueFn = Callable[[str, str, "str | None", str], None]

_WATCH_TIMEOUT_SECONDS = 300
_NEVER_WATCHED = frozenset({("", "Event"), ("events.k8s.io", "Event")})
"""Events a run records (k8s_event) get the owner for GC, but watching them would loop: every
re-recorded Event (count+1) would re-queue the owner, whose run records the Event again."""
_LIST_PAGE = 500
_BACKOFF_START = 0.5
_BACKOFF_MAX = 30.0


# ---------------------------------------------------------------------------------------------------
# pure parts


def fingerprint(obj: Mapping[str, Any]) -> str:
    """Digest of everything a change to which should re-queue the owner (see module docstring)."""
    trimmed = {k: v for k, v in obj.items() if k != "status"}
    meta = dict(trimmed.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    trimmed["metadata"] = meta
    return hashlib.sha256(json.dumps(trimmed, sort_keys=True, separators=(",", ":"), default=str)
                          .encode()).hexdigest()


def should_enqueue(event_type: str, old_fingerprint: str | None, obj: Mapping[str, Any]) -> bool:
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


def owners_of(obj: Mapping[str, Any], kinds: OwnerKinds, *, follow_annotations: bool = True) -> set[OwnerKey]:
    """The owners of ``obj`` among the kinds we reconcile.

    ownerReferences first (only the controller reference when one of ours is marked ``controller``);
    an owner reference's namespace is the object's own, or none for cluster-scoped owner kinds. Without a
    matching reference, the primary-resource annotations (``<ns>/<name>`` and ``<Kind>.<group>``).
    """
    meta = obj.get("metadata") or {}
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


class _Gone(Exception):
    """The resourceVersion we watch from is too old (410): re-list."""


class _KindWatch:
    """List+watch one dependent kind (in one namespace or all) and report owner re-queues."""

    def __init__(self, watcher: "DependentWatcher", kind: DependentKind, namespace: str | None) -> None:
        self.watcher = watcher
        self.kind = kind
        self.namespace = namespace
        self.known: dict[str, tuple[str, frozenset[OwnerKey]]] = {}  # uid -> (fingerprint, owners)
        self.resource_version = ""
        self.synced = asyncio.Event()

    @property
    def path(self) -> str:
        base = (
            f"/apis/{self.kind.group}/{self.kind.version}" if self.kind.group else f"/api/{self.kind.version}"
        )
        if self.namespace and self.kind.namespaced:
            return f"{base}/namespaces/{self.namespace}/{self.kind.plural}"
        return f"{base}/{self.kind.plural}"

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.kind.kind}.{self.kind.group or 'core'}/{self.kind.version}{where}"

    async def run(self) -> None:
        backoff = _BACKOFF_START
        need_list = not (self.synced.is_set() and self.resource_version)
        while True:
            try:
                if need_list:
                    await self.watcher._owner_kinds()
                    await self._list()
                    need_list = False
                    self.synced.set()
                await self._watch()
                backoff = _BACKOFF_START  # a watch that ended normally (timeoutSeconds) is healthy
            except asyncio.CancelledError:
                raise
            except _Gone:
                log.debug("dependent watch %s: resourceVersion expired, re-listing", self.describe())
                need_list = True
            except Exception as exc:  # network, 5xx, 403...: keep trying, never die silently
                log.warning("dependent watch %s: %s; retrying in %.1fs", self.describe(), exc, backoff)
                await asyncio.sleep(backoff * (0.8 + 0.4 * random.random()))
                backoff = min(backoff * 2, _BACKOFF_MAX)
                if not self.resource_version:
                    need_list = True

    async def _list(self) -> None:
        seen: dict[str, tuple[str, frozenset[OwnerKey]]] = {}
        objects: list[dict[str, Any]] = []
        cont = ""
        while True:
            query = {"limit": str(_LIST_PAGE)}
            if cont:
                query["continue"] = cont
            doc = await self.watcher._get_json(f"{self.path}?{urlencode(query)}")
            objects.extend(o for o in doc.get("items") or [] if isinstance(o, dict))
            meta = doc.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                self.resource_version = str(meta.get("resourceVersion") or "")
                break
        first = not self.synced.is_set()
        for obj in objects:
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            owners = self.watcher._owners(obj, self.kind)
            if not uid or not owners:
                continue
            fp = fingerprint(obj)
            seen[uid] = (fp, owners)
            if not first:
                previous = self.known.get(uid)
                if previous is not None and previous[0] != fp:
                    self.watcher._enqueue(previous[1] | owners, "modified (re-list)", obj)
        if not first:
            for uid, (_, owners) in self.known.items():
                if uid not in seen:
                    self.watcher._enqueue(owners, "deleted (re-list)", None)
        self.known = seen

    async def _watch(self) -> None:
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(_WATCH_TIMEOUT_SECONDS)}
        if self.resource_version:
            query["resourceVersion"] = self.resource_version
        session = self.watcher._session_or_fail()
        headers = await self.watcher._headers()
        url = self.watcher._upstream.base + f"{self.path}?{urlencode(query)}"
        async with session.get(
            url, headers=headers, server_hostname=self.watcher._upstream.server_hostname
        ) as resp:
            if resp.status == 410:
                raise _Gone()
            if resp.status != 200:
                body = (await resp.read())[:300].decode("utf-8", "replace")
                raise RuntimeError(f"watch {self.path}: HTTP {resp.status}: {body}")
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._on_line(line)

    def _on_line(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("dependent watch %s: unparsable event line %r", self.describe(), line[:200])
            return
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self.resource_version = str(meta["resourceVersion"])
        if type_ == "BOOKMARK":
            return
        uid = str(meta.get("uid") or "")
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


class DependentWatcher:
    """Watches each dependent kind once (not once per CR) and re-queues owners."""

    def __init__(self, api_client: "kubernetes.client.ApiClient", enqueue: EnqueueFn, *,
                 owner_kinds: set[tuple[str, str]], cluster_scoped: bool,
                 namespaces: Iterable[str] = ()) -> None:
        """``namespaces``: watch only these (one watch per namespace for namespaced kinds); empty = all.

        Cluster-scoped kinds are always watched cluster-wide.
        """
        self._upstream = Upstream(api_client.configuration)
        self._enqueue_fn = enqueue
        self._owner_gks = set(owner_kinds)
        self._cluster_scoped = cluster_scoped
        self._namespaces = tuple(sorted(set(namespaces)))
        self._kinds: OwnerKinds | None = None
        self._kinds_lock = asyncio.Lock()
        self._watches: dict[tuple[str, str, str, str | None], _KindWatch] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._session: ClientSession | None = None
        self._closed = False

    # -- public ---------------------------------------------------------------------------------------

    async def ensure(self, kind: DependentKind) -> None:
        """Start watching ``kind`` unless already watched; returns once the initial list is done.

        Does nothing when no watch has ``watchDependentResources`` (empty ``owner_kinds``).
        """
        if self._closed or not self._owner_gks:
            return
        if (kind.group, kind.kind) in self._owner_gks or (kind.group, kind.kind) in _NEVER_WATCHED:
            return  # the CR kinds themselves are watched by intake; Events see _NEVER_WATCHED
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
            task = asyncio.create_task(watch.run(), name=f"dependent-watch {watch.describe()}")
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
        self._closed = True
        tasks = [*self._pending, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pending.clear()
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- internals ------------------------------------------------------------------------------------

    def _session_or_fail(self) -> "ClientSession":
        from aiohttp import ClientSession, ClientTimeout, TCPConnector

        if self._closed:
            raise RuntimeError("DependentWatcher is closed")
        if self._session is None:
            self._session = ClientSession(
                connector=TCPConnector(ssl=self._upstream.ssl, limit=0),
                # sock_read bounds a silent connection: the server sends bookmarks / ends at timeoutSeconds
                timeout=ClientTimeout(total=None, sock_connect=30, sock_read=_WATCH_TIMEOUT_SECONDS + 60),
            )
        return self._session

    async def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        auth = await self._upstream.auth_header()
        if auth:
            headers["Authorization"] = auth
        return headers

    async def _get_json(self, path: str) -> dict[str, Any]:
        session = self._session_or_fail()
        async with session.get(self._upstream.base + path, headers=await self._headers(),
                               server_hostname=self._upstream.server_hostname) as resp:
            if resp.status == 410:
                raise _Gone()
            data = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}: {data[:300].decode('utf-8', 'replace')}")
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise RuntimeError(f"GET {path}: not a JSON object")
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

    def _owners(self, obj: Mapping[str, Any], kind: DependentKind) -> frozenset[OwnerKey]:
        assert self._kinds is not None
        follow_annotations = kind.namespaced or self._cluster_scoped
        return frozenset(owners_of(obj, self._kinds, follow_annotations=follow_annotations))

    def _enqueue(self, owners: Iterable[OwnerKey], why: str, obj: Mapping[str, Any] | None) -> None:
        meta = (obj or {}).get("metadata") or {}
        for api_version, kind, namespace, name in sorted(
            owners, key=lambda o: (o[0], o[1], o[2] or "", o[3])
        ):
            dependent_ns = meta.get("namespace")
            log.info("re-queue %s %s/%s: dependent %s %s", kind, namespace or "", name, why,
                     f"{dependent_ns + '/' if dependent_ns else ''}{meta.get('name', '')}")
            try:
                self._enqueue_fn(api_version, kind, namespace, name)
            except Exception:
                log.exception("dependent watches: enqueue(%s %s/%s) failed", kind, namespace or "", name)
