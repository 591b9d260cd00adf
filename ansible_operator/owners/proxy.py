"""Owner references for objects roles create, done transparently by a loopback API proxy.

Roles talk to the cluster through kubernetes.core, which only knows "a kubeconfig". Like Operator SDK we
give each run a kubeconfig that points at a small reverse proxy in the operator process; the credential
in that kubeconfig identifies the custom resource (CR) being reconciled, and the proxy adds the owner to
every object the run creates:

* an ``ownerReference`` (apiVersion, kind, name, uid) when the owner is cluster-scoped, or when both are
  namespaced in the same namespace -- Kubernetes garbage-collects these with the CR;
* otherwise (cluster-scoped dependent of a namespaced CR, or another namespace) the two annotations
  ``operator-sdk/primary-resource: <ns>/<name>`` and ``operator-sdk/primary-resource-type: <Kind>.<group>``,
  which :mod:`ansible_operator.dependents` uses to find the owner again.

Owners are added on **create only**, as Operator SDK's proxy does: ``injectOwnerReferenceHandler``
(``internal/ansible/proxy/inject_owner.go`` in operator-framework/ansible-operator-plugins) rewrites the
body of ``POST`` requests and nothing else, deciding the form with ``k8sutil.SupportsOwnerReference``. An
object that already exists is never given a new owner: an update (``PUT``, kubernetes.core's
``force: true``), a patch or a server-side apply of an existing object is forwarded untouched, so a role
that rewrites a user's pre-existing object (say, a finalizer role force-updating a ConfigMap) does not make
it a dependent that garbage collection deletes with the CR. The one case SDK misses: ``PUT`` and
server-side apply (``PATCH`` with ``application/apply-patch+yaml``) *create* the object when it is absent.
When the API server answers such a request ``201 Created``, the proxy adds the owner right after, with a
JSON patch guarded by the new object's ``uid`` (field manager ``ansible-operator``, so the role's later
applies, which do not list the reference, do not remove it) and hands the role the patched object.
``ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE=false`` (or ``OwnerProxy(own_put_apply_creates=False)``) turns
that off for SDK's exact behaviour: objects a ``PUT``/apply creates get no owner and outlive the CR.
As in SDK, a ``PUT`` replaces ``metadata`` too: a reference the role's definition does not list is dropped.

The owner reference carries neither ``controller`` nor ``blockOwnerDeletion`` (SDK sets neither; setting
``controller: true`` would make creating an object that already has a controller reference fail, and
``blockOwnerDeletion`` needs extra RBAC on the CR's ``finalizers`` subresource on clusters that enforce it).

Dependent watches (:mod:`ansible_operator.dependents`) are started for a kind when a run creates an object
of it, and -- like SDK's ``recoverDependentWatches`` in ``cache_response.go`` -- when a run reads
(``GET``) an object that already carries an owner of the run's kind, so watches come back after a restart
even if the roles only update what exists.

Everything else -- reads, watches (streamed chunk by chunk), deletes, other patches, subresources,
status codes, headers -- is forwarded unchanged to the real API server using the operator's own
connection settings (TLS, bearer token or basic auth), so it works against any cluster, not just the
sandbox. Requests with an unknown token get ``401``; the token is the only thing tying a request to an
owner, and it lives only for one run (:meth:`OwnerProxy.release`).

This module also owns what each run is given to reach the cluster (:class:`Credentials`, asked by reconcile
once per run): :class:`ProxyCredentials` (a kubeconfig for this proxy, the default) or
:class:`PassThroughCredentials` (the operator's own kubeconfig, ``--inject-owner-ref=false``).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import http
import json
import logging
import os
import secrets
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Protocol
from urllib.parse import urlsplit

import yaml

from ansible_operator.kube import CONNECT_TIMEOUT, ApiError, NotFound, bearer_token, check_response

if TYPE_CHECKING:  # pragma: no cover
    import kubernetes.client
    from aiohttp import ClientSession, ClientTimeout, web

log = logging.getLogger(__name__)

__all__ = [
    "ANNOTATION_PRIMARY_RESOURCE",
    "ANNOTATION_PRIMARY_RESOURCE_TYPE",
    "Credentials",
    "DependentKind",
    "Owner",
    "OwnerProxy",
    "PassThroughCredentials",
    "ProxyCredentials",
    "RequestInfo",
    "Upstream",
    "inject_owner",
    "injection_mode",
    "owner_ref",
    "OWN_PUT_APPLY_CREATES_ENV",
    "own_put_apply_creates_from_env",
    "owned_by_kind_of",
    "owner_json_patch",
    "parse_request_path",
    "request_action",
]

OWN_PUT_APPLY_CREATES_ENV = "ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE"
"""``false`` / ``0`` / ``no``: objects created by ``PUT`` or server-side apply get no owner (Operator SDK)."""

ANNOTATION_PRIMARY_RESOURCE = "operator-sdk/primary-resource"
ANNOTATION_PRIMARY_RESOURCE_TYPE = "operator-sdk/primary-resource-type"

APPLY_PATCH = "application/apply-patch+yaml"
_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "authorization",
}
_RESPONSE_DROP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "content-length",
}
_WEBSOCKET_DROP = _HOP_BY_HOP | {
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol",
}


# ---------------------------------------------------------------------------------------------------
# pure parts


@dataclass(frozen=True)
class DependentKind:
    """A kind of object runs have created (what :class:`~ansible_operator.dependents.DependentWatcher`
    watches)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class Owner:
    """The CR a run reconciles, as far as owner injection needs it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    uid: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def namespaced(self) -> bool:
        return bool(self.namespace)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> "Owner":
        """From a CR object; ``ValueError`` naming the missing field (uid is needed for ownerReferences)."""
        meta = obj.get("metadata") or {}
        missing = [
            f
            for f, v in (
                ("apiVersion", obj.get("apiVersion")),
                ("kind", obj.get("kind")),
                ("metadata.name", meta.get("name")),
                ("metadata.uid", meta.get("uid")),
            )
            if not v
        ]
        if missing:
            raise ValueError(f"owner object lacks {', '.join(missing)}: cannot inject owner references")
        return cls(str(obj["apiVersion"]), str(obj["kind"]), str(meta["name"]),
                   str(meta["namespace"]) if meta.get("namespace") else None, str(meta["uid"]))


def owner_ref(owner: Owner) -> dict[str, Any]:
    """The ownerReference Operator SDK injects (no ``controller``/``blockOwnerDeletion``, see module doc)."""
    return {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid}


def injection_mode(owner: Owner, dependent_namespaced: bool,
                   dependent_namespace: str | None) -> Literal["ownerReference", "annotations"]:
    """``SupportsOwnerReference``: where Kubernetes allows an ownerReference from dependent to owner.

    Cluster-scoped owner -> reference; cluster-scoped dependent of a namespaced owner -> annotations;
    namespaced both -> reference only within the same namespace.
    """
    if not owner.namespaced:
        return "ownerReference"
    if not dependent_namespaced:
        return "annotations"
    return "ownerReference" if dependent_namespace == owner.namespace else "annotations"


def inject_owner(obj: dict[str, Any], owner: Owner, mode: Literal["ownerReference", "annotations"]) -> bool:
    """Add the owner to ``obj`` in place; returns whether ``obj`` changed. Never duplicates a reference."""
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise ValueError("metadata is not an object")
    if mode == "ownerReference":
        refs = meta.get("ownerReferences")
        if refs is None:
            refs = meta["ownerReferences"] = []
        if not isinstance(refs, list):
            raise ValueError("metadata.ownerReferences is not a list")
        for ref in refs:
            if isinstance(ref, dict) and (ref.get("uid") == owner.uid or (
                    not ref.get("uid") and ref.get("kind") == owner.kind and ref.get("name") == owner.name
                    and str(ref.get("apiVersion", "")).rpartition("/")[0] == owner.group)):
                return False
        refs.append(owner_ref(owner))
        return True
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    if not isinstance(annotations, dict):
        raise ValueError("metadata.annotations is not an object")
    wanted = {
        ANNOTATION_PRIMARY_RESOURCE: f"{owner.namespace or ''}/{owner.name}",
        ANNOTATION_PRIMARY_RESOURCE_TYPE: f"{owner.kind}.{owner.group}" if owner.group else owner.kind,
    }
    if all(annotations.get(k) == v for k, v in wanted.items()):
        return False
    annotations.update(wanted)
    return True


@dataclass(frozen=True)
class RequestInfo:
    """What an API path addresses (a subset of kube-apiserver's RequestInfo)."""

    group: str
    version: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_path: bool = False


def parse_request_path(path: str) -> RequestInfo | None:
    """``/api/v1/namespaces/ns/configmaps/x`` -> RequestInfo; ``None`` for non-resource paths (discovery,
    ``/version``, ``/openapi``...). Follows kube-apiserver's rules, including ``namespaces/<ns>/status``."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "api":
        if len(parts) < 2:
            return None
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis":
        if len(parts) < 3:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch_path = False
    if rest and rest[0] == "watch":
        watch_path, rest = True, rest[1:]
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 2:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in ("status", "finalize"):
            rest = rest[2:]
        else:
            # the Namespace object itself (or its status/finalize subresource)
            return RequestInfo(group, version, "namespaces", None, rest[1],
                               rest[2] if len(rest) > 2 else None, watch_path)
    return RequestInfo(group, version, rest[0], namespace,
                       rest[1] if len(rest) > 1 else None,
                       "/".join(rest[2:]) or None, watch_path)


Action = Literal["inject", "own_if_created", "recover", "forward"]


def request_action(method: str, info: RequestInfo, content_type: str) -> Action:
    """What the proxy does with a request to a resource path (see the module docstring).

    ``inject``: ``POST`` to a collection (a create) -- the owner goes into the body, as in SDK;
    ``own_if_created``: ``PUT`` or server-side apply of a named object -- forwarded untouched, the owner is
    added afterwards only if the API server created the object (``201``);
    ``recover``: ``GET`` of one object -- forwarded, and an object already owned by the run's kind
    restarts the dependent watch for its kind; ``forward``: everything else, untouched.
    """
    if info.subresource or info.watch_path:
        return "forward"
    if method == "POST":
        return "inject" if info.name is None else "forward"
    if method == "PUT" and info.name is not None:
        return "own_if_created"
    if method == "PATCH" and info.name is not None and content_type == APPLY_PATCH:
        return "own_if_created"
    if method == "GET" and info.name is not None:
        return "recover"
    return "forward"


def owner_json_patch(obj: Mapping[str, Any], owner: Owner,
                     mode: Literal["ownerReference", "annotations"]) -> list[dict[str, Any]] | None:
    """RFC 6902 operations adding ``owner`` to the just-created ``obj`` (``None`` if it already has it).

    The first operation tests ``metadata.uid``: if the object was deleted and re-created by someone else
    in between, the API server refuses the patch instead of giving a stranger's object an owner.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not meta.get("uid"):
        raise ValueError("created object has no metadata.uid")
    probe = json.loads(json.dumps(dict(obj)))
    if not inject_owner(probe, owner, mode):
        return None
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": meta["uid"]}]
    if mode == "ownerReference":
        if isinstance(meta.get("ownerReferences"), list) and meta["ownerReferences"]:
            ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": owner_ref(owner)})
        else:
            ops.append({"op": "add", "path": "/metadata/ownerReferences", "value": [owner_ref(owner)]})
        return ops
    wanted = {k: v for k, v in probe["metadata"]["annotations"].items()
              if k in (ANNOTATION_PRIMARY_RESOURCE, ANNOTATION_PRIMARY_RESOURCE_TYPE)}
    if isinstance(meta.get("annotations"), dict) and meta["annotations"]:
        for key, value in wanted.items():
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
                    "value": value,
                }
            )
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
    return ops


def own_put_apply_creates_from_env(env: Mapping[str, str]) -> bool:
    """``$ANSIBLE_OPERATOR_OWNER_ON_APPLY_CREATE`` (default true). A value that is not a boolean is reported
    and read as false -- Operator SDK's behaviour, the one that cannot get anything garbage-collected."""
    raw = env.get(OWN_PUT_APPLY_CREATES_ENV, "true").strip().lower()
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw not in ("false", "0", "no", "off"):
        log.error("%s=%r is not true or false: objects a PUT or server-side apply creates get no owner "
                  "(Operator SDK's behaviour)", OWN_PUT_APPLY_CREATES_ENV, raw)
    return False


def owned_by_kind_of(obj: Mapping[str, Any], owner: Owner) -> bool:
    """Whether ``obj`` already belongs to some object of ``owner``'s kind (SDK's ``recoverDependentWatches``):
    an ownerReference with the owner's apiVersion and kind, or the primary-resource-type annotation."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("apiVersion") == owner.api_version
            and ref.get("kind") == owner.kind
        ):
            return True
    annotations = meta.get("annotations")
    wanted = f"{owner.kind}.{owner.group}" if owner.group else owner.kind
    return isinstance(annotations, dict) and annotations.get(ANNOTATION_PRIMARY_RESOURCE_TYPE) == wanted


def _reason(code: int) -> str:
    """metav1.StatusReason for an HTTP status (``Forbidden``, ``NotFound``, ``BadRequest``...)."""
    try:
        return http.HTTPStatus(code).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


# ---------------------------------------------------------------------------------------------------
# upstream connection


class Upstream:
    """How to reach the real API server, taken from a kubernetes.client.Configuration.

    The proxy forwards with exactly the operator's own connection settings (TLS verification, client
    certificates, bearer/basic auth, token refresh).
    """

    def __init__(self, configuration: "kubernetes.client.Configuration") -> None:
        self.configuration = configuration
        self.base = str(configuration.host).rstrip("/")
        self.ssl: ssl.SSLContext | bool = False
        scheme = urlsplit(self.base).scheme
        if scheme == "https":
            ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
            if configuration.cert_file:
                ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
            if not configuration.verify_ssl:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif getattr(configuration, "assert_hostname", None) is False:
                ctx.check_hostname = False
            self.ssl = ctx
        elif scheme != "http":
            raise ValueError(f"upstream host {self.base!r} is not an http(s) URL")
        self.server_hostname: str | None = getattr(configuration, "tls_server_name", None) or None
        self._refreshed = 0.0
        self._lock = asyncio.Lock()

    async def auth_header(self) -> str | None:
        """``Authorization`` value for upstream; refreshes exec/OIDC tokens via the client's hook (<=
        1/min)."""
        cfg = self.configuration
        hook = getattr(cfg, "refresh_api_key_hook", None)
        if hook is not None and time.monotonic() - self._refreshed > 60:
            async with self._lock:
                if time.monotonic() - self._refreshed > 60:
                    await asyncio.to_thread(hook, cfg)
                    self._refreshed = time.monotonic()
        token = bearer_token(cfg) if cfg.api_key else None
        if token:
            return token
        if cfg.username or cfg.password:
            basic = base64.b64encode(f"{cfg.username or ''}:{cfg.password or ''}".encode()).decode()
            return f"Basic {basic}"
        return None


class _Discovery:
    """Cached resource lists per group/version, fetched by the proxy itself (with the operator's auth).

    A miss re-fetches the group/version at once (a role may have just created a CRD); concurrent misses
    share one fetch. Fetch errors propagate: the caller must not create an object it cannot classify.
    """

    def __init__(self, fetch: Callable[[str], Any]) -> None:
        self._fetch = fetch
        self._by_gv: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._generation: dict[tuple[str, str], int] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def lookup(self, group: str, version: str, plural: str) -> dict[str, Any] | None:
        """The APIResource for ``plural`` in group/version, or ``None`` if the server does not serve it."""
        key = (group, version)
        found = self._by_gv.get(key, {}).get(plural)
        if found is not None:
            return found
        seen_generation = self._generation.get(key, 0)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._generation.get(key, 0) == seen_generation:  # nobody refreshed while we waited
                path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
                doc = await self._fetch(path)
                resources = doc.get("resources", []) if isinstance(doc, dict) else []
                self._by_gv[key] = {r["name"]: r for r in resources
                                    if isinstance(r, dict) and "/" not in str(r.get("name", ""))}
                self._generation[key] = seen_generation + 1
            return self._by_gv.get(key, {}).get(plural)


# ---------------------------------------------------------------------------------------------------
# credentials: what each run's roles use to reach the cluster


class Credentials(Protocol):
    """Gives each run the cluster credentials its roles use (reconcile asks, once per run)."""

    def envvars_for(self, owner: dict[str, Any], run_dir: Path) -> dict[str, str]: ...

    def release(self, run_dir: Path) -> None: ...


class PassThroughCredentials:
    """Runs use the operator's own kubeconfig (or the in-cluster service account when there is none):
    ``--inject-owner-ref=false``."""

    def __init__(self, kubeconfig: str | None) -> None:
        self.kubeconfig = kubeconfig

    def envvars_for(self, owner: dict[str, Any], run_dir: Path) -> dict[str, str]:
        if not self.kubeconfig:
            return {}
        path = str(Path(self.kubeconfig).resolve())
        return {"K8S_AUTH_KUBECONFIG": path, "KUBECONFIG": path}

    def release(self, run_dir: Path) -> None:
        return None


class ProxyCredentials:
    """Each run gets a kubeconfig of its own pointing at the owner-injecting proxy, with a token bound to
    the run's custom resource (released, so refused, once the run ends)."""

    def __init__(self, proxy: "OwnerProxy") -> None:
        self.proxy = proxy

    def envvars_for(self, owner: dict[str, Any], run_dir: Path) -> dict[str, str]:
        path = self.proxy.kubeconfig_for(owner, run_dir / "kubeconfig")
        return {"K8S_AUTH_KUBECONFIG": str(path), "KUBECONFIG": str(path)}

    def release(self, run_dir: Path) -> None:
        self.proxy.release(run_dir / "kubeconfig")


# ---------------------------------------------------------------------------------------------------
# the proxy


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
        self._runner: web.AppRunner | None = None
        self._discovery = _Discovery(self._fetch_json)
        self.url = ""

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        from aiohttp import ClientSession, TCPConnector, web

        # Pass bodies and Accept-Encoding through untouched: no added headers, no decompression.
        self._session = ClientSession(
            connector=TCPConnector(ssl=self._upstream.ssl, limit=0),
            timeout=_request_timeout(),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        )
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

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._tokens.clear()
        self._paths.clear()

    # -- credentials --------------------------------------------------------------------------------

    def kubeconfig_for(self, owner: dict[str, Any], path: Path) -> Path:
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
            return web.Response(status=401, body=_status_body(401, "Unauthorized", "Unauthorized"),
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
                return web.Response(status=exc.code, body=_status_body(exc.code, exc.reason, str(exc)),
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
        from aiohttp import ClientError, ClientPayloadError, web

        assert self._session is not None
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._forward_websocket(request)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        auth = await self._upstream.auth_header()
        if auth:
            headers["Authorization"] = auth
        url = self._upstream.base + request.rel_url.raw_path_qs
        streams = (request.query.get("watch") in ("true", "1") or "/watch/" in request.path
                   or request.query.get("follow") in ("true", "1"))
        try:
            upstream = await self._session.request(
                request.method,
                url,
                data=body if body or request.method in ("POST", "PUT", "PATCH") else None,
                headers=headers,
                allow_redirects=False,
                server_hostname=self._upstream.server_hostname,
                timeout=(_stream_timeout(request.query.get("timeoutSeconds")) if streams
                         else _request_timeout()),
            )
        except (ClientError, OSError) as exc:  # TimeoutError included
            return _upstream_failed(exc)
        streaming = streams or upstream.headers.get("Content-Length") is None
        try:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_DROP}
            if not streaming:
                try:
                    data = await upstream.read()
                except (ClientError, OSError) as exc:
                    return _upstream_failed(exc)
                return web.Response(status=upstream.status, body=data, headers=out_headers)
            # Watches and logs: pass each chunk on as soon as it arrives.
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ClientPayloadError, ConnectionError) as exc:
                log.debug("owner proxy: stream %s ended: %s", request.path, exc)
            return response
        finally:
            if streaming:
                upstream.close()  # never return a half-read watch connection to the pool
            else:
                upstream.release()

    async def _forward_websocket(self, request: "web.Request") -> "web.StreamResponse":
        """exec/attach/port-forward (kubernetes.core.k8s_exec): relay WebSocket frames both ways."""
        from aiohttp import ClientError, WSMsgType, WSServerHandshakeError, web

        assert self._session is not None
        protocols = tuple(p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")
                          if p.strip())
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _WEBSOCKET_DROP}
        auth = await self._upstream.auth_header()
        if auth:
            headers["Authorization"] = auth
        url = self._upstream.base + request.rel_url.raw_path_qs
        try:
            upstream = await self._session.ws_connect(url, protocols=protocols, headers=headers,
                                                      server_hostname=self._upstream.server_hostname,
                                                      autoping=True, max_msg_size=0)
        except WSServerHandshakeError as exc:
            # aiohttp does not keep the refusal's body; keep at least its status and say what was refused
            # (a 403 stays Forbidden, not "Invalid response status (400 BadGateway)").
            code = exc.status if exc.status and exc.status >= 400 else 502
            return web.Response(
                status=code,
                body=_status_body(code, _reason(code), "owner proxy: the API server refused the WebSocket "
                                  f"upgrade of {request.method} {request.rel_url.path}: HTTP {exc.status}"),
                content_type="application/json",
            )
        except (ClientError, OSError) as exc:
            return web.Response(
                status=502,
                body=_status_body(502, "BadGateway", f"owner proxy: upstream: {exc}"),
                content_type="application/json",
            )
        downstream = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (),
                                           max_msg_size=0)
        await downstream.prepare(request)

        async def pump(src: Any, dst: Any) -> None:
            async for msg in src:
                if msg.type == WSMsgType.BINARY:
                    await dst.send_bytes(msg.data)
                elif msg.type == WSMsgType.TEXT:
                    await dst.send_str(msg.data)
                else:
                    break
            await dst.close()

        tasks = [
            asyncio.ensure_future(pump(upstream, downstream)),
            asyncio.ensure_future(pump(downstream, upstream)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await upstream.close()
            await downstream.close()
        return downstream

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


READ_TIMEOUT = 60.0
"""Seconds the owner proxy waits for the API server's next bytes on a role's request (watches and followed
logs excepted); then the role's client gets 504, and a connection nobody answers is dropped."""
TOTAL_TIMEOUT = 300.0
"""Seconds one request of a role may take through the proxy in all (watches and followed logs excepted)."""


def _request_timeout() -> "ClientTimeout":
    from aiohttp import ClientTimeout

    return ClientTimeout(total=TOTAL_TIMEOUT, sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT)


def _upstream_failed(exc: BaseException) -> "web.Response":
    """What a role's client gets when the API server did not answer in time (504) or at all (502)."""
    from aiohttp import web

    timed_out = isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
    status, reason = (504, "Timeout") if timed_out else (502, "BadGateway")
    what = f"no answer within {READ_TIMEOUT:g}s" if timed_out and not str(exc) else str(exc)
    return web.Response(status=status, body=_status_body(status, reason, f"owner proxy: upstream: {what}"),
                        content_type="application/json")


def _stream_timeout(timeout_seconds: str | None) -> "ClientTimeout":
    """A watch or a followed log: no limit between two chunks (a quiet watch is fine), but an end: the
    timeout it asked the API server for (which ends it then) and a minute more; an hour without one."""
    from aiohttp import ClientTimeout

    try:
        asked = max(0, int(timeout_seconds)) if timeout_seconds else 3600
    except ValueError:
        asked = 3600
    return ClientTimeout(total=asked + 60, sock_connect=CONNECT_TIMEOUT)


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
