"""The owner proxy: a loopback reverse proxy in the operator process in front of the real API server.

Each run gets a kubeconfig for it (:meth:`OwnerProxy.kubeconfig_for`, through
:class:`~ansible_operator.owners.credentials.ProxyCredentials`) whose token identifies the custom resource
(CR) the run reconciles. For each request with a known token the proxy

* adds the owner to the body of a create (``POST``), per :mod:`ansible_operator.owners.injection`, and
  reports the object's kind to ``on_dependent`` (the dependent watches of
  :mod:`ansible_operator.dependents`);
* adds it right after a ``PUT`` or server-side apply that created its object (``201``), with a JSON patch
  guarded by the new object's ``uid`` (field manager ``ansible-operator``), and hands the role the patched
  object (unless ``own_put_apply_creates=False`` / ``ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE=false``);
* restarts the dependent watch for an object's kind when a run reads (``GET``) an object that already
  carries an owner of the run's kind (SDK's ``recoverDependentWatches``);
* forwards everything else unchanged (:mod:`~ansible_operator.owners.forward`, WebSockets through
  :mod:`~ansible_operator.owners.relay`) with the operator's own connection settings.

Requests with an unknown token get ``401``; the token is the only thing tying a request to an owner, and it
lives only for one run (:meth:`OwnerProxy.release`). Which kind a path addresses comes from the API server's
discovery (:class:`~ansible_operator.owners.upstream.Discovery`); when it cannot be had, a create is refused
(``503``) rather than made without its owner.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml

from ansible_operator.kube import ApiError, NotFound, check_response
from ansible_operator.kubetypes import KubeObject
from ansible_operator.owners.forward import forward
from ansible_operator.owners.injection import (
    DependentKind,
    Owner,
    inject_owner,
    injection_mode,
    own_put_apply_creates_from_env,
    owned_by_kind_of,
    owner_json_patch,
)
from ansible_operator.owners.paths import Action, RequestInfo, parse_request_path, request_action
from ansible_operator.owners.relay import relay_websocket
from ansible_operator.owners.statuses import status_body
from ansible_operator.owners.upstream import Discovery, Upstream, request_timeout

if TYPE_CHECKING:  # pragma: no cover
    import kubernetes.client
    from aiohttp import ClientSession, web

log = logging.getLogger("ansible_operator.owners")

__all__ = ["OwnerProxy"]


class OwnerProxy:
    """Loopback HTTP reverse proxy (aiohttp) in the operator process in front of the real API server."""

    def __init__(self, upstream: "kubernetes.client.Configuration", *,
                 on_dependent: Callable[[DependentKind], None] | None = None,
                 inject_owner_ref: bool = True, host: str = "127.0.0.1", port: int = 0,
                 own_put_apply_creates: bool | None = None) -> None:
        self._upstream = Upstream(upstream)
        self._own_put_apply_creates = (own_put_apply_creates if own_put_apply_creates is not None
                                       else own_put_apply_creates_from_env(os.environ))
        self._on_dependent = on_dependent
        self._inject = inject_owner_ref
        self._host = host
        self._port = port
        self._tokens: dict[str, Owner] = {}
        self._paths: dict[Path, str] = {}
        self._reported: set[tuple[str, str, str]] = set()
        self._session: ClientSession | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self._discovery = Discovery(self._fetch_json)
        self.url = ""

    # -- lifecycle ----------------------------------------------------------------------------------

    def _new_session(self) -> "ClientSession":
        from aiohttp import ClientSession, TCPConnector

        # Pass bodies and Accept-Encoding through untouched: no added headers, no decompression.
        return ClientSession(
            connector=TCPConnector(ssl=self._upstream.ssl, limit=0),
            timeout=request_timeout(),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        )

    async def start(self) -> None:
        from aiohttp import web

        self._session = self._new_session()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a role that drops a watch connection must end our upstream watch too.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self._host}:{port}"
        log.info("owner proxy listening on %s -> %s", self.url, self._upstream.base)

    def drop_connections(self) -> None:
        """After an API outage: the upstream connections from before it may be dead without a word (a lost
        NAT entry answers nothing, not even a reset), and a role's request on one would wait out the read
        timeout (60 s). New requests get a new session; closing the old one ends the requests still on it,
        which their roles see as a 502 and retry."""
        old = self._session
        if old is None:
            return
        self._session = self._new_session()
        task = asyncio.get_running_loop().create_task(old.close(), name="owner-proxy:close-old-session")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._tokens.clear()
        self._paths.clear()

    # -- credentials --------------------------------------------------------------------------------

    def kubeconfig_for(self, owner: KubeObject, path: Path) -> Path:
        """Write a 0600 kubeconfig at ``path`` whose bearer token is bound to ``owner``; returns ``path``.

        The context's namespace is the owner's, so tasks that omit ``namespace`` land next to the CR.
        """
        if not self.url:
            raise RuntimeError("OwnerProxy.kubeconfig_for() called before start()")
        bound = Owner.from_object(owner)
        path = Path(path)
        self.release(path)
        token = secrets.token_urlsafe(32)
        context: dict[str, Any] = {"cluster": "ansible-operator-proxy", "user": "ansible-operator-run"}
        if bound.namespace:
            context["namespace"] = bound.namespace
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "ansible-operator-proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "ansible-operator-run", "user": {"token": token}}],
            "contexts": [{"name": "ansible-operator-run", "context": context}],
            "current-context": "ansible-operator-run",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o600)
            yaml.safe_dump(config, fh, sort_keys=False)
        self._tokens[token] = bound
        self._paths[path] = token
        return path

    def release(self, path: Path) -> None:
        """Forget the token written to ``path`` (after the run); later requests with it get 401."""
        token = self._paths.pop(Path(path), None)
        if token is not None:
            self._tokens.pop(token, None)

    def owner_for_token(self, token: str) -> Owner | None:
        return self._tokens.get(token)

    # -- request handling ---------------------------------------------------------------------------

    def _owner_of(self, request: "web.Request") -> Owner | None:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return self._tokens.get(value.strip())
        if scheme.lower() == "basic":  # kubeconfigs with username=<token> (Operator SDK's style)
            try:
                user = base64.b64decode(value.strip()).decode().partition(":")[0]
            except (ValueError, UnicodeDecodeError):
                return None
            return self._tokens.get(user)
        return None

    async def _handle(self, request: "web.Request") -> "web.StreamResponse":
        from aiohttp import web

        owner = self._owner_of(request)
        if owner is None:
            return web.Response(status=401, body=status_body(401, "Unauthorized", "Unauthorized"),
                                content_type="application/json")
        body = await request.read()
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        info = parse_request_path(request.path)
        action: Action = "forward"
        if self._inject and info is not None:
            action = request_action(request.method, info, content_type)
            if action == "own_if_created" and not self._own_put_apply_creates:
                action = "forward"
        dependent: DependentKind | None = None
        if action == "inject":
            assert info is not None
            try:
                body, dependent = await self._inject_into_body(owner, info, body, content_type)
            except _Refuse as exc:
                return web.Response(status=exc.code, body=status_body(exc.code, exc.reason, str(exc)),
                                    content_type="application/json")
        response = await self._forward(request, body)
        if dependent is not None and 200 <= response.status < 300:
            self._report(dependent)
        elif (action == "own_if_created" and response.status == 201 and isinstance(response, web.Response)
              and not request.query.get("dryRun")):  # a dry run answers 201 too, but created nothing
            assert info is not None
            response = await self._own_created(owner, info, request.path, response)
        elif action == "recover" and response.status == 200 and isinstance(response, web.Response):
            assert info is not None
            await self._recover_watch(owner, info, response)
        return response

    async def _dependent_kind(self, owner: Owner, info: RequestInfo) -> tuple[DependentKind, bool] | None:
        """The kind ``info`` addresses and whether it is namespaced, or ``None`` when no owner belongs on it
        (not served, virtual, or the owner's own kind). Discovery errors propagate."""
        resource = await self._discovery.lookup(info.group, info.version, info.resource)
        if resource is None:
            return None
        verbs = set(resource.get("verbs") or [])
        if not {"get", "list", "watch"} <= verbs:
            return None  # virtual resource (TokenReview, SubjectAccessReview...)
        kind = str(resource.get("kind", ""))
        if (info.group, kind) == (owner.group, owner.kind):
            return None  # the CR kind itself (e.g. writing a CR's own status / spec)
        namespaced = bool(resource.get("namespaced"))
        return DependentKind(info.group, info.version, kind, info.resource, namespaced), namespaced

    async def _inject_into_body(self, owner: Owner, info: RequestInfo, body: bytes,
                                content_type: str) -> tuple[bytes, DependentKind | None]:
        """A create: return the body with the owner added and the dependent kind to report."""
        gv = f"{info.group}/{info.version}" if info.group else info.version
        try:
            target = await self._dependent_kind(owner, info)
        except Exception as exc:
            # Like Operator SDK: better refuse than create an object without its owner (no GC, no watch).
            raise _Refuse(503, "ServiceUnavailable",
                          f"owner proxy: discovery of {gv} failed, cannot add the owner: {exc}") from exc
        if target is None:
            # Not served (the API server answers 404 itself, with its usual message), virtual, or own kind.
            return body, None
        dependent, namespaced = target
        try:
            obj = json.loads(body) if body else None
        except ValueError:
            return body, None  # let the API server produce its usual error for a malformed body
        if not isinstance(obj, dict):
            return body, None
        namespace = info.namespace or ((obj.get("metadata") or {}).get("namespace") if namespaced else None)
        mode = injection_mode(owner, namespaced, namespace)
        try:
            changed = inject_owner(obj, owner, mode)
        except ValueError:
            return body, None
        if changed:
            log.debug(
                "owner proxy: %s %s %s/%s owned by %s %s/%s",
                mode,
                dependent.kind,
                namespace or "",
                (obj.get("metadata") or {}).get("name", ""),
                owner.kind,
                owner.namespace or "",
                owner.name,
            )
            body = json.dumps(obj, separators=(",", ":")).encode()
        return body, dependent

    async def _own_created(self, owner: Owner, info: RequestInfo, path: str,
                           response: "web.Response") -> "web.Response":
        """A ``PUT``/server-side apply that created its object (201): add the owner now, return the result.

        On failure the object stays without an owner (it exists already; failing the role's request would
        not undo that) and the proxy logs an error naming it.
        """
        from aiohttp import web

        what = f"{info.resource} {info.namespace + '/' if info.namespace else ''}{info.name}"
        try:
            target = await self._dependent_kind(owner, info)
            if target is None:
                return response
            dependent, namespaced = target
            obj = _decode_object(response)
            if obj is None:
                obj = await self._fetch_json(path)
            mode = injection_mode(owner, namespaced, info.namespace)
            ops = owner_json_patch(obj, owner, mode)
            if ops is None:
                self._report(dependent)
                return response
            status, data = await self._send_json(
                "PATCH", path + "?fieldManager=ansible-operator", ops, "application/json-patch+json")
            check_response(status, data)
        except ApiError as exc:
            log.error("owner proxy: created %s but adding its owner %s %s failed: %s", what, owner.kind,
                      owner.name, exc)
            return response
        except Exception as exc:
            log.error(
                "owner proxy: created %s without its owner %s %s: %s", what, owner.kind, owner.name, exc
            )
            return response
        log.debug(
            "owner proxy: %s %s created by PUT/apply, owned by %s %s", mode, what, owner.kind, owner.name
        )
        self._report(dependent)
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in ("content-length", "content-encoding", "content-type")}
        return web.Response(status=201, body=data, headers=headers, content_type="application/json")

    async def _recover_watch(self, owner: Owner, info: RequestInfo, response: "web.Response") -> None:
        """A read of an object the owner's kind already owns starts that kind's dependent watch."""
        obj = _decode_object(response)
        if obj is None or not owned_by_kind_of(obj, owner):
            return
        try:
            target = await self._dependent_kind(owner, info)
        except Exception as exc:
            log.debug("owner proxy: no dependent watch recovery for %s: %s", info.resource, exc)
            return
        if target is not None:
            self._report(target[0])

    def _report(self, dependent: DependentKind) -> None:
        key = (dependent.group, dependent.version, dependent.kind)
        if key in self._reported or self._on_dependent is None:
            return
        self._reported.add(key)
        try:
            self._on_dependent(dependent)
        except Exception:  # a watcher problem must not fail the role's request
            log.exception("owner proxy: on_dependent(%s) failed", dependent)

    async def _forward(self, request: "web.Request", body: bytes) -> "web.StreamResponse":
        assert self._session is not None
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await relay_websocket(self._session, self._upstream, request)
        return await forward(self._session, self._upstream, request, body)

    async def _send_json(self, method: str, path: str, payload: Any, content_type: str) -> tuple[int, bytes]:
        """``method path`` upstream with a JSON body and the operator's own credentials."""
        assert self._session is not None
        headers = {"Accept": "application/json", "Accept-Encoding": "identity", "Content-Type": content_type}
        auth = await self._upstream.auth_header()
        if auth:
            headers["Authorization"] = auth
        async with self._session.request(
            method,
            self._upstream.base + path,
            data=json.dumps(payload).encode(),
            headers=headers,
            server_hostname=self._upstream.server_hostname,
        ) as resp:
            return resp.status, await resp.read()

    async def _fetch_json(self, path: str) -> Any:
        """GET ``path`` from upstream with the operator's own credentials (discovery)."""
        assert self._session is not None
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        auth = await self._upstream.auth_header()
        if auth:
            headers["Authorization"] = auth
        async with self._session.get(self._upstream.base + path, headers=headers,
                                     server_hostname=self._upstream.server_hostname) as resp:
            data = await resp.read()
            try:
                check_response(resp.status, data, f"GET {path}")
            except NotFound:
                return {}  # group/version not served
            return json.loads(data)



def _decode_object(response: "web.Response") -> dict[str, Any] | None:
    """The JSON object in a buffered response (gzip-decoded if need be); ``None`` if it is not one."""
    data = response.body
    if not isinstance(data, (bytes, bytearray)) or "json" not in (response.content_type or ""):
        return None
    try:
        if response.headers.get("Content-Encoding", "").lower() == "gzip":
            data = gzip.decompress(data)
        obj = json.loads(data)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


class _Refuse(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
