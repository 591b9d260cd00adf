"""kopf's private internals, in one place: every use of ``kopf._*`` by the runner is in this module.

kopf's public API (``kopf.on.event``, ``kopf.operator``, settings, ``ConnectionInfo``) covers the event
loop; the runner needs a few more of its parts, each for a reason:

* **the event stream and relists** (:func:`install_stream_hook`): the intake takes each raw event of its
  resources straight from kopf's list/watch stream, in stream order, instead of through kopf's per-object
  machinery (a worker task, a memory, a body view, loggers and a patch per object, then an ``on.event``
  handler invocation): at start-up with 10,000 objects that machinery cost more than the intake itself,
  and it kept a memory per object. kopf has no public hook for a raw stream consumer, nor for "a listing
  ended", which the intake needs to forget objects deleted during a watch gap (informer ``Replace``).
  The hook wraps ``watching.continuous_watch``, the one place that lists, then yields ``Bookmark.LISTED``;
  kopf still runs the watches (namespaces, discovery, reconnects, relists, pauses).
* **dependent watches** (:func:`infinite_watch`, :func:`is_listed`, :func:`use_vault`, :func:`get`):
  the watches of owned objects reuse kopf's list/watch stream (relists after 410, bookmarks, retries)
  and its credentials vault and session instead of a second client.
* **typed errors** (:func:`api_error`) and **the vault** (:func:`vault`) for ``kopf.operator(vault=)``.
* **forced relists** (:func:`relist`): a new shard selector (kopf's public
  ``settings.watching.shard_selectors`` or ``label_selectors``, :func:`set_shard_selector`,
  :func:`set_label_selector`) applies to kopf's next request, but
  only a fresh listing shows the objects it now selects; kopf lists again after a 410 Gone, so the watch
  request ends with one (``watch_objs`` below).
* **watch restarts** (:func:`install_watch_restarts`, :func:`restart_watches`): when the API server
  answers again after an outage, every watch request is ended and resumed from its resourceVersion, rather
  than waiting on a connection that may have died silently (client-go's HTTP/2 health check has the same
  purpose).
* **bounded decoding** (:func:`install_bounded_decoding`): every answer and watch event kopf reads is
  decoded by :func:`ansible_operator.apijson.loads`, so that no object the API server accepts (nesting to
  10,000 levels) can end kopf's watcher, and with it the operator (issue 20).

:func:`check` runs at start-up and names whatever of this a kopf version lacks, so that a kopf upgrade
fails loudly at once instead of misbehaving later; kopf is pinned to a tested range in ``pyproject.toml``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import types
from typing import Any, AsyncIterator, Callable

from ansible_operator import apijson

#: (module, attribute) of kopf's internals used here; :func:`check` verifies each.
_USED = (
    ("kopf._cogs.clients.api", "request"),
    ("kopf._cogs.clients.api", "stream"),
    ("kopf._cogs.clients.api", "get"),
    ("kopf._cogs.clients.api", "json"),
    ("kopf._cogs.clients.auth", "vault_var"),
    ("kopf._cogs.clients.errors", "APIError"),
    ("kopf._cogs.clients.watching", "continuous_watch"),
    ("kopf._cogs.clients.watching", "infinite_watch"),
    ("kopf._cogs.clients.watching", "watch_objs"),
    ("kopf._cogs.clients.watching", "Bookmark"),
    ("kopf._cogs.structs.credentials", "Vault"),
    ("kopf._cogs.structs.references", "Resource"),
    ("kopf._cogs.structs.references", "NamespaceName"),
)


def check() -> None:
    """Fail with one message naming every internal of kopf's that this version lacks."""
    import importlib

    missing = []
    for module, attribute in _USED:
        try:
            found = hasattr(importlib.import_module(module), attribute)
        except ImportError:
            found = False
        if not found:
            missing.append(f"{module}.{attribute}")
    from kopf._cogs.clients import watching

    if not hasattr(getattr(watching, "Bookmark", None), "LISTED"):
        missing.append("kopf._cogs.clients.watching.Bookmark.LISTED")
    if missing:
        raise RuntimeError(f"this kopf version lacks what the runner uses of it ({', '.join(missing)}); "
                           "install a kopf version in the range pyproject.toml names")


# ---- bounded decoding --------------------------------------------------------------------------------


def install_bounded_decoding() -> None:
    """Make kopf decode every answer (``api.get``/``post``/``patch``/``delete``, via ``api.request``) and
    every watch event (``api.stream``) with :func:`ansible_operator.apijson.loads`. Idempotent."""
    from kopf._cogs.clients import api

    if getattr(api.request, "_bounded_decoding", False):
        return
    original = api.request

    async def request(*args: Any, **kwargs: Any) -> Any:
        response = await original(*args, **kwargs)
        response.json = functools.partial(response.json, loads=apijson.loads)  # type: ignore[method-assign]
        return response

    request._bounded_decoding = True  # type: ignore[attr-defined]
    api.request = request
    # api.stream decodes each line with the module's ``json.loads``: give the module a json of its own
    api.json = types.SimpleNamespace(**{**vars(json), "loads": apijson.loads})  # type: ignore[attr-defined,assignment]


# ---- the event stream and relists --------------------------------------------------------------------

ListingEnded = Callable[[tuple[str, str, str], "str | None", list[tuple["str | None", str, "str | None"]],
                         "str | None"], None]
"""Called with ((group, version, kind), namespace or None, [(namespace, name, uid), ...], the shard
selector the listing was made with or None) per listing."""

Deliver = Callable[[tuple[str, str, str], "str | None", dict[str, Any]], bool]
"""Called with ((group, version, kind), event type (None: a listing's object), the object) for every event
of the stream; True: taken, kopf does not see it."""

_YIELD_EVERY = 100
"""Events taken in a row before the stream lets the event loop run: a listing's chunk is in memory, so
kopf's stream hands it over without awaiting anything."""

_OWN_STREAM: contextvars.ContextVar[bool] = contextvars.ContextVar("ansible_operator_own_stream",
                                                                  default=False)
"""True in a task (a context) iterating streams of its own (:func:`infinite_watch`: the dependent
watches): the hook leaves their events to them. A kind both watched and owned (a CR whose role creates
CRs of another watched kind) has two streams; only kopf's, the one its handlers registered, is the
intake's."""


def install_stream_hook(listing_ended: ListingEnded, deliver: Deliver) -> None:
    """Wrap kopf's ``continuous_watch`` so that every event goes to ``deliver`` first (what it takes never
    reaches kopf's per-object processing), and every listing that completes is reported to
    ``listing_ended``, after its objects were delivered. Installed once per process (later calls keep the
    first callbacks)."""
    from kopf._cogs.clients import watching

    original = watching.continuous_watch
    if getattr(original, "_stream_hook", False):
        return
    bookmark = watching.Bookmark.LISTED

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        if _OWN_STREAM.get():
            async for item in original(**kwargs):
                yield item
            return
        listed: list[tuple[str | None, str, str | None]] | None = []
        resource = kwargs.get("resource")
        gvk = (resource.group, resource.version, resource.kind) if resource is not None else None
        # read as kopf's listing reads it, with no await in between (so no ring change either)
        shard = shard_selector_of(kwargs["settings"], resource) if resource is not None else None
        taken = 0
        async for item in original(**kwargs):
            if listed is not None:
                if item is bookmark:
                    if gvk is not None:
                        listing_ended(gvk, kwargs.get("namespace"), listed, shard)
                    listed = None
                elif isinstance(item, dict) and item.get("type") is None:
                    meta = (item.get("object") or {}).get("metadata") or {}
                    if meta.get("name"):
                        listed.append((meta.get("namespace"), meta["name"], meta.get("uid")))
            event: Any = item  # a raw event (a dict) or a kopf Bookmark
            body = (event.get("object") if isinstance(event, dict) and event.get("type") != "BOOKMARK"
                    else None)
            if gvk is not None and isinstance(body, dict) and deliver(gvk, event.get("type"), body):
                taken += 1
                if taken % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                continue
            yield item

    continuous_watch._stream_hook = True  # type: ignore[attr-defined]
    continuous_watch.__wrapped__ = original  # type: ignore[attr-defined]
    watching.continuous_watch = continuous_watch


# ---- shard selectors (public settings) and forced relists ------------------------------------------


def shard_selector_of(settings: Any, resource: Any) -> str | None:
    """What narrows kopf's next list or watch request of ``resource`` to a shard: its ``shardSelector``
    (kopf's public ``settings.watching.shard_selectors``; the first that applies, as kopf picks it), else its
    label selector (``settings.watching.label_selectors``, which only sharding sets: the watches' own
    selectors are applied by the intake)."""
    found = settings.watching.shard_selectors.collect(resource)
    if found:
        return str(found[0])
    labels = sorted(set(settings.watching.label_selectors.collect(resource)))
    return ",".join(labels) if labels else None


def set_shard_selector(settings: Any, group: str, version: str, kind: str, selector: str | None) -> None:
    """Make kopf's list and watch requests of one resource carry ``selector`` (None: none). Takes effect
    at the next request: see :func:`relist`."""
    _set(settings.watching.shard_selectors, (group, version, kind), selector)


def set_label_selector(settings: Any, group: str, version: str, kind: str, selector: str | None) -> None:
    """The same for a ``labelSelector`` (public ``settings.watching.label_selectors``)."""
    _set(settings.watching.label_selectors, (group, version, kind), selector)


def _set(mapping: Any, key: tuple[str, str, str], selector: str | None) -> None:
    if selector is None:
        mapping.pop(key, None)
    else:
        mapping[key] = selector


_RELIST_PENDING: set[tuple[str, str, str]] = set()
"""(group, version, kind) whose watch must end in a relist (kopf has no call for that): see relist()."""


def relist(group: str, version: str, kind: str) -> int:
    """List ``group/version/kind`` again (after a new shard selector): every open watch request of it ends
    as after a 410 Gone, so kopf lists afresh, with the settings of the moment; a request that opens later
    (the listing was in flight) does the same at once. Call on the event loop. Returns how many requests
    were open."""
    gvk = (group, version, kind)
    _RELIST_PENDING.add(gvk)
    count = 0
    for request in list(_WATCH_REQUESTS):
        if request.gvk == gvk and not request.restarting:
            request.restarting = request.relisting = True
            count += 1
            if request.waiting and request.task is not None:
                request.task.cancel()
    return count


_GONE = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "Expired", "code": 410,
                                     "message": "relist: the shard selector changed (ansible-operator)"}}
"""What kopf's ``continuous_watch`` answers by returning, so that ``infinite_watch`` lists again."""


# ---- restarting watch requests -----------------------------------------------------------------------


class _WatchRequest:
    """One watch request kopf has open (``watching.watch_objs``), and whether it is being restarted (or
    ended for a relist)."""

    def __init__(self, task: asyncio.Task[Any] | None, gvk: tuple[str, str, str] | None) -> None:
        self.task = task
        self.gvk = gvk
        """None for a stream of its own (:func:`infinite_watch`): unsharded, a relist is not its business."""
        self.waiting = False  # awaiting kopf's stream (not handing an event to its consumer)
        self.restarting = False
        self.relisting = False


_WATCH_REQUESTS: set[_WatchRequest] = set()


def install_watch_restarts() -> None:
    """Wrap kopf's ``watch_objs`` (one watch request) so that :func:`restart_watches` can end it; kopf's
    ``continuous_watch`` then watches again from the last resourceVersion it saw, as after any disconnect,
    so nothing is missed. Idempotent."""
    from kopf._cogs.clients import watching

    original = watching.watch_objs
    if getattr(original, "_restartable", False):
        return

    async def watch_objs(**kwargs: Any) -> AsyncIterator[Any]:
        resource = kwargs.get("resource")
        gvk = (resource.group, resource.version, resource.kind) if resource is not None else None
        if _OWN_STREAM.get():
            gvk = None  # restarted after an outage like any other, never relisted for a shard change
        if gvk in _RELIST_PENDING:  # asked for while kopf was listing with the old selector
            _RELIST_PENDING.discard(gvk)
            yield _GONE
            return
        request = _WatchRequest(asyncio.current_task(), gvk)
        _WATCH_REQUESTS.add(request)
        stream: Any = original(**kwargs)  # an async generator
        try:
            while not request.restarting:
                request.waiting = True
                try:
                    item = await stream.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if request.restarting and request.task is not None and request.task.uncancel() == 0:
                        break  # our cancel (restart_watches, relist), not the task's
                    raise
                finally:
                    request.waiting = False
                yield item
        finally:
            _WATCH_REQUESTS.discard(request)
            await stream.aclose()
        if request.relisting and gvk is not None:
            _RELIST_PENDING.discard(gvk)
            yield _GONE

    watch_objs._restartable = True  # type: ignore[attr-defined]
    watching.watch_objs = watch_objs


def restart_watches() -> int:
    """End every open watch request (kopf reconnects each from its last resourceVersion): after the API
    server was unreachable, a request on a connection that died silently would otherwise wait for kopf's
    inactivity timeout. Call on the event loop. Returns how many were open."""
    count = 0
    for request in list(_WATCH_REQUESTS):
        if request.restarting:
            continue
        request.restarting = True
        count += 1
        if request.waiting and request.task is not None:
            request.task.cancel()  # raised where it awaits kopf's stream, inside the wrapper
    return count


# ---- kopf's stream, session and credentials, for the dependent watches -------------------------------


async def infinite_watch(settings: Any, *, group: str, version: str, plural: str, kind: str,
                         namespaced: bool, namespace: str | None) -> AsyncIterator[Any]:
    """kopf's list-then-watch stream of one resource (re-lists after 410, retries); yields raw events
    (``{"type", "object"}``, ``type`` None for the listing) and :func:`is_listed` markers: every event, even
    of a resource the intake watches too (the stream hook leaves this stream alone)."""
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    resource = references.Resource(group=group, version=version, plural=plural, kind=kind,
                                   namespaced=namespaced)
    where = references.NamespaceName(namespace) if namespace else None
    # Set in the iterating task's context and left set: the dependent watches' tasks share one context
    # (kopf's vault) and iterate nothing else, so one stream ending must not clear it for the others.
    _OWN_STREAM.set(True)
    async for item in watching.infinite_watch(settings=_unsharded(settings), resource=resource,
                                              namespace=where):
        yield item


def _unsharded(settings: Any) -> Any:
    """``settings`` without shard or label selectors: a stream of its own sees every object of its kind,
    whichever replica's shard it is in (a child CR re-queues its parent wherever the child runs)."""
    import dataclasses

    watching = settings.watching
    return dataclasses.replace(settings, watching=dataclasses.replace(
        watching, shard_selectors=type(watching.shard_selectors)(),
        label_selectors=type(watching.label_selectors)()))


def is_listed(item: Any) -> bool:
    """Whether a stream item is kopf's "the listing is complete" marker."""
    from kopf._cogs.clients import watching

    return item is watching.Bookmark.LISTED


def use_vault(context: contextvars.Context, vault: Any) -> None:
    """Make kopf's API calls made in ``context`` take their credentials from ``vault``."""
    from kopf._cogs.clients import auth

    context.run(auth.vault_var.set, vault)


async def get(path: str, settings: Any, logger: Any) -> Any:
    """GET through kopf's client (its session, credentials and retries)."""
    from kopf._cogs.clients import api

    return await api.get(path, settings=settings, logger=logger)


def vault(connection: Any | None = None) -> Any:
    """kopf's credentials vault, empty (kopf's login handler fills it) or holding one ``ConnectionInfo``."""
    from kopf._cogs.structs.credentials import Vault

    return Vault() if connection is None else Vault({"ansible-operator": connection})


def api_error(exc: BaseException) -> tuple[int, str, str] | None:
    """(HTTP status, reason, message) of one of kopf's client errors; None for anything else."""
    from kopf._cogs.clients import errors

    if not isinstance(exc, errors.APIError):
        return None
    payload = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], dict) else {}
    message = exc.message or (str(exc.args[0]) if exc.args and exc.args[0] else "")
    return exc.status or 0, str(payload.get("reason") or "Unknown"), message
