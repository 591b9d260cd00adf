"""aiohttp front end of the sandbox: URL routing, discovery, verbs, watch streaming, Status errors.

One catch-all route parses Kubernetes REST paths (``/api/v1/namespaces/ns/configmaps/name/status``,
``/apis/group/version/watch/...``) into (resource type, namespace, name, subresource) and calls
:mod:`api`. Every failure leaves as a ``Status`` object with the real code and reason; nothing a client
sends can produce a 500 or stop the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from ansible_operator_sandbox import (
    apf,
    auth,
    conversion,
    discovery,
    listoptions,
    openapi,
    patching,
    protobuf,
    tables,
)
from ansible_operator_sandbox.api import MAX_REQUEST_BYTES, Api, WriteOptions, decode_body, patch_kind
from ansible_operator_sandbox.errors import (
    ApiError,
    bad_request,
    conflict,
    method_not_allowed,
    path_not_found,
    request_entity_too_large,
)
from ansible_operator_sandbox.lifecycle import Lifecycle
from ansible_operator_sandbox.resources import AUTHENTICATION_GROUP, REVIEW_GROUP, ResourceType
from ansible_operator_sandbox.store import Event, Store, TooOldResourceVersion
from ansible_operator_sandbox.timeutil import now_rfc3339

# The authenticated user of a request (secure mode), set by the authentication step.
USER_KEY: web.RequestKey[auth.UserInfo] = web.RequestKey("user", auth.UserInfo)

log = logging.getLogger(__name__)

JSON = "application/json"
BOOKMARK_INTERVAL = 5.0  # seconds between BOOKMARK events on idle watches that asked for them
IDLE_CHECK = 2.0  # how often an idle watch checks whether its client went away


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Go's json.Encoder (the apiserver's serializer) ends every document with a newline
    return web.Response(body=_dumps(obj) + b"\n", status=status, content_type=JSON, headers=headers)


def _body_type(request: web.Request) -> str:
    """The media type a body is decoded as: the Content-Type header, JSON when there is none.

    kube-apiserver reads a body without Content-Type as its first serializer, JSON
    (k8s.io/apiserver negotiation.NegotiateInputSerializerForMediaType); the kubernetes client 37 sends
    create/replace/delete bodies without one. aiohttp's ``request.content_type`` would say
    ``application/octet-stream`` then (a 415). PATCH does not come here: without a patch type it is 415.
    """
    return request.headers.get("Content-Type", "").strip() or JSON


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1", "yes")


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    """Metadata-only form (client-go metadata clients ask for it with ``as=PartialObjectMetadata``)."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def _paginate(items: list[dict[str, Any]], rv: int, limit: str, after: tuple[str, str] | None
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``limit``/``continue`` paging over the (namespace, name)-sorted list.

    A page continues after the last object of the previous one (``after``, from its token) in the
    *current* state (the real server continues a snapshot; for a sandbox the difference is not observable by
    clients that page once through).
    """
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    start = 0
    if after is not None:
        start = next((i for i, o in enumerate(items) if _sort_key(o) > after), len(items))
    try:
        n = int(limit) if limit else 0
    except ValueError:
        raise bad_request(f"limit: invalid value {limit!r}") from None
    if n <= 0 or start + n >= len(items):
        return items[start:], meta
    page = items[start:start + n]
    meta["continue"] = listoptions.encode_continue(rv, _sort_key(page[-1]))
    meta["remainingItemCount"] = len(items) - start - n
    return page, meta


def _sort_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))





def _page_not_found() -> web.Response:
    """What kube-apiserver's mux answers for a path no API group/version serves (plain text)."""
    return web.Response(status=404, text="404 page not found\n")


def _csr_requestor(body: Any, user: auth.UserInfo | None) -> None:
    """The CSR registry's PrepareForCreate: spec.username/uid/groups/extra are the requesting user's,
    whatever the body says (non-secure mode: everyone is the admin)."""
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        return
    user = user or auth.UserInfo(auth.ADMIN_USER, (auth.MASTERS, auth.AUTHENTICATED))
    spec = body["spec"]
    for field in ("username", "uid", "groups", "extra"):
        spec.pop(field, None)
    spec["username"] = user.name
    if user.uid:
        spec["uid"] = user.uid
    spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}

def _list_items(rtype: ResourceType, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A typed list's items carry no apiVersion/kind on a real server (the list names them once); custom
    resources' (unstructured) items keep theirs."""
    if not rtype.builtin:
        return items
    return [{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} for obj in items]


#: The APIServices kube-apiserver registers for its built-in group versions (cmd/kube-apiserver/app/
#: aggregator.go; read off a real 1.36 server): (groupPriorityMinimum, versionPriority). apiregistration
#: itself has none.
APISERVICE_PRIORITIES: dict[tuple[str, str], tuple[int, int]] = {
    ("", "v1"): (18000, 1),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v1"): (17500, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("batch", "v1"): (17400, 15),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("policy", "v1"): (17100, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("resource.k8s.io", "v1"): (16200, 21),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
}

# What this server checks (it has no etcd or informers of its own: its store answers, or nothing does)
HEALTH_CHECKS = {
    "healthz": ("ping", "log", "etcd", "poststarthook/start-apiextensions-controllers"),
    "livez": ("ping", "log", "etcd", "poststarthook/start-apiextensions-controllers"),
    "readyz": ("ping", "log", "etcd", "etcd-readiness", "informer-sync",
               "poststarthook/start-apiextensions-controllers", "shutdown"),
}

class Route:
    """A parsed resource URL."""

    def __init__(self, rtype: ResourceType, namespace: str | None, name: str | None, sub: str | None,
                 watch: bool) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.name = name
        self.sub = sub
        self.watch = watch


class ApiServer:
    """The HTTP application over an :class:`Api`."""

    def __init__(self, api: Api, lifecycle: Lifecycle) -> None:
        self.api = api
        self.store: Store = api.store
        self.registry = api.registry
        self.lifecycle = lifecycle
        self.address = "127.0.0.1:0"
        # secure mode (sandbox/auth.py): set by Sandbox.start(secure=True); None serves everyone as today
        self.authorizer: auth.RBACAuthorizer | None = None
        self._authenticator: auth.Authenticator | None = None
        self._pki_factory: Any = None  # () -> auth.Pki, for TokenRequest/TokenReview in non-secure mode
        # larger bodies are refused while reading (413 as kube-apiserver's MaxRequestBodyBytes)
        self.app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    # ---- setup -----------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        """What kube-apiserver creates at start (kept if it already exists in the data dir): the four
        namespaces, the bootstrap RBAC policy (cluster-admin, admin/edit/view, the system: roles; enforced
        only in secure mode), the system PriorityClasses and the API Priority and Fairness configuration
        (:mod:`apf`)."""
        ns_type = self.registry.get("", "v1", "namespaces")
        assert ns_type is not None
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            if self.store.peek(("/namespaces", "", name)) is None:
                self.api.create(ns_type, None, {"metadata": {"name": name}})
        for plural, obj in auth.bootstrap_policy():
            self._create_missing(auth.RBAC_GROUP, plural, obj)
        for name, value, description in (
            ("system-node-critical", 2000001000,
             "Used for system critical pods that must not be moved from their current node."),
            ("system-cluster-critical", 2000000000,
             "Used for system critical pods that must run in the cluster, but can be moved to another node"
             " if necessary."),
        ):
            self._create_missing("scheduling.k8s.io", "priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "description": description, "preemptionPolicy": "PreemptLowerPriority"})
        apf.ensure_bootstrap(self.api)

        now = now_rfc3339()
        for group, versions in self.registry.groups().items():
            for version in versions:
                if (group, version) not in APISERVICE_PRIORITIES:
                    continue
                group_priority, version_priority = APISERVICE_PRIORITIES[group, version]
                self._create_missing("apiregistration.k8s.io", "apiservices", {
                    "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                    "metadata": {"name": f"{version}.{group}",
                                 "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
                    "spec": {"group": group, "version": version, "groupPriorityMinimum": group_priority,
                             "versionPriority": version_priority},
                    "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local",
                                               "message": "Local APIServices are always available",
                                               "lastTransitionTime": now}]}})

    def _create_missing(self, group: str, plural: str, obj: dict[str, Any]) -> None:
        rtype = self.registry.get(group, "v1", plural)
        assert rtype is not None
        if self.store.peek(self.api.key(rtype, None, obj["metadata"]["name"])) is None:
            created = self.api.create(rtype, None, obj)
            if obj.get("status") and rtype.has_status and created.get("status") != obj["status"]:
                self.api.update(rtype, None, obj["metadata"]["name"], {**created, "status": obj["status"]},
                                subresource="status")

    def install(self, crd: dict[str, Any]) -> dict[str, Any]:
        """Create a CRD, or update it when it already exists (restart on a data dir, or a re-install)."""
        crd_type = self.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_type is not None
        name = (crd.get("metadata") or {}).get("name", "")
        if self.store.peek(("apiextensions.k8s.io/customresourcedefinitions", "", name)) is None:
            return self.api.create(crd_type, None, crd)
        body = dict(
            crd, metadata={k: v for k, v in (crd.get("metadata") or {}).items() if k != "resourceVersion"}
        )
        return self.api.update(crd_type, None, name, body)

    def enable_security(self, pki: auth.Pki) -> None:
        """Secure mode: authenticate every request and authorize it with the stored RBAC."""
        self._authenticator = auth.Authenticator(pki, self.store)
        self.authorizer = auth.RBACAuthorizer(self.store)
        for plural, obj in auth.bootstrap_policy():  # bootstrap() made them; a data dir may predate them
            self._create_missing(auth.RBAC_GROUP, plural, obj)

    @property
    def authenticator(self) -> auth.Authenticator:
        """Token issuing and review (made on first use in non-secure mode, where nothing is enforced)."""
        if self._authenticator is None:
            if self._pki_factory is None:
                raise ApiError(503, "ServiceUnavailable", "the sandbox has no service-account signing key")
            self._authenticator = auth.Authenticator(self._pki_factory(), self.store)
        return self._authenticator

    @property
    def secure(self) -> bool:
        return self.authorizer is not None

    # ---- entry -----------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.StreamResponse:
        # a client that accepts only protobuf gets its answer (object, list or Status) in protobuf
        return protobuf.negotiate(request.headers.get("Accept", ""), await self._handle(request))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if self.authorizer is not None:
                self._guard(request)
            return await self._dispatch(request)
        except ApiError as e:
            return _json(e.status(), e.code)
        except web.HTTPRequestEntityTooLarge:
            too_large = request_entity_too_large(MAX_REQUEST_BYTES)
            return _json(too_large.status(), too_large.code)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a sandbox bug: report it as the apiserver would, keep serving
            log.exception("sandbox: %s %s failed", request.method, request.path_qs)
            return _json(ApiError(500, "InternalError", f"Internal error occurred: {e}").status(), 500)

    def _guard(self, request: web.Request) -> None:
        """Secure mode: 401 for credentials that do not verify, 403 for what RBAC does not allow."""
        assert self.authorizer is not None
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        peer_der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        user = self.authenticator.authenticate(request.headers.get("Authorization", ""), peercert, peer_der)
        if "Impersonate-User" in request.headers or "Impersonate-Group" in request.headers:
            user = auth.impersonate(user, request.headers, request.headers.getall("Impersonate-Group", []),
                                    self.authorizer)
        request[USER_KEY] = user
        attrs = auth.request_attributes(user, request.method, request.path, request.query)
        allowed, reason = self.authorizer.authorize(attrs)
        if not allowed:
            raise auth.forbidden(attrs, reason)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if not parts:
            return _json({"paths": discovery.root_paths(self.registry)})
        head = parts[0]
        is_resource = head in ("api", "apis") and len(parts) > (2 if head == "api" else 3)
        if method != "GET" and not is_resource:
            raise method_not_allowed()
        if head in ("healthz", "readyz", "livez"):
            if "verbose" in request.query:  # the checks, one per line, as kube-apiserver lists them
                checks = [f"[+]{name} ok" for name in HEALTH_CHECKS[head]]
                return web.Response(text="\n".join(checks) + f"\n{head} check passed\n")
            return web.Response(text="ok")
        if head == "version" and len(parts) == 1:
            return _json(discovery.version())
        if head == "openapi":
            spec = openapi.document(
                self.registry, parts[1:], request.query, request.headers.get("Accept", "")
            )
            if isinstance(spec, bytes):  # gnostic protobuf (client-go's OpenAPISchema)
                return web.Response(body=spec, headers={"Content-Type": openapi.V2_PROTOBUF})
            return _json(spec)
        if head == "api":
            group = ""
            if len(parts) == 1:
                if discovery.wants_aggregated(request.headers.get("Accept", "")):
                    return self._aggregated(legacy=True)
                return _json(discovery.api_versions(self.address))
            version, rest = parts[1], parts[2:]
        elif head == "apis":
            if len(parts) == 1:
                if discovery.wants_aggregated(request.headers.get("Accept", "")):
                    return self._aggregated(legacy=False)
                return _json(discovery.group_list(self.registry))
            group = parts[1]
            if len(parts) == 2:
                doc = discovery.group(self.registry, group)
                if doc is None:
                    return _page_not_found()
                return _json(doc)
            version, rest = parts[2], parts[3:]
        else:
            return _page_not_found()
        doc = discovery.resource_list(self.registry, group, version)
        if doc is None:
            # a group nobody serves: the mux's plain-text answer; an unknown version of a served group
            # (or of /api): an API Status
            if head == "apis" and discovery.group(self.registry, group) is None:
                return _page_not_found()
            raise path_not_found()
        if not rest:
            return _json(doc)
        route = self._route(group, version, rest)
        if route.watch and method != "GET":
            raise method_not_allowed()
        if method == "GET":
            if route.name is None:
                if route.watch or _flag(request.query.get("watch")):
                    return await self._watch(request, route)
                return self._list(request, route)
            if route.watch:
                return await self._watch(request, route, single=route.name)
            return self._get(request, route)
        if route.sub == "token":  # serviceaccounts/<name>/token: create only
            if method != "POST":
                raise method_not_allowed()
            assert route.namespace is not None and route.name is not None
            raw = await request.read()
            body = decode_body(raw, _body_type(request)) if raw.strip() else {}
            return _json(self.authenticator.token_request(route.namespace, route.name, body), 201)
        if route.sub == "eviction":  # pods/<name>/eviction: create only
            if method != "POST":
                raise method_not_allowed()
            assert route.name is not None
            return _json(self.api.evict(route.rtype, route.namespace, route.name, await self._body(request),
                                        self._write_opts(request)), 201)
        if method == "POST" and route.name is None:
            if route.rtype.namespaced and route.namespace is None:
                raise method_not_allowed()
            return await self._create(request, route)
        if method == "PUT" and route.name is not None:
            return await self._update(request, route)
        if method == "PATCH" and route.name is not None:
            return await self._patch(request, route)
        if method == "DELETE":
            if route.name is None:
                return await self._delete_collection(request, route)
            return await self._delete(request, route)
        raise method_not_allowed()

    def _aggregated(self, legacy: bool) -> web.Response:
        """Aggregated discovery (kubectl 1.32 asks for it first; every group in one answer)."""
        return web.Response(body=_dumps(discovery.aggregated(self.registry, legacy)) + b"\n",
                            headers={"Content-Type": discovery.AGGREGATED, "Vary": "Accept"})

    def _route(self, group: str, version: str, rest: list[str]) -> Route:
        watch = False
        if rest[0] == "watch":
            watch = True
            rest = rest[1:]
        namespace = None
        if rest and rest[0] == "namespaces" and len(rest) >= 3 and (
                group != "" or len(rest) > 3 or rest[2] not in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise path_not_found()
        rtype = self.registry.get(group, version, rest[0])
        if rtype is None or (namespace is not None and not rtype.namespaced):
            raise path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rtype.subresources:
            self.api.refuse_subresource(rtype, namespace, name, sub)
        return Route(rtype, namespace, name, sub, watch)

    # ---- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _write_opts(request: web.Request) -> WriteOptions:
        q = request.query
        dry = q.getall("dryRun", [])
        if any(d not in ("All", "") for d in dry):
            raise bad_request(f"Invalid dry run value: {dry}")
        fv = q.get("fieldValidation", "")
        if fv not in ("", "Ignore", "Warn", "Strict"):
            raise bad_request(f'fieldValidation must be one of "Ignore", "Warn" or "Strict", got {fv!r}')
        return WriteOptions(dry_run="All" in dry, field_manager=q.get("fieldManager"),
                            user_agent=request.headers.get("User-Agent", ""),
                            force=_flag(q.get("force")), field_validation=fv)

    @staticmethod
    def _warning_headers(warnings: list[str]) -> dict[str, str] | None:
        if not warnings:
            return None
        # RFC 7234 quoted-string, as k8s.io/apimachinery/pkg/util/net.NewWarningHeader escapes it
        quoted = ('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"' for w in warnings)
        return {"Warning": ", ".join(f"299 - {q}" for q in quoted)}

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        return decode_body(raw, _body_type(request))

    def _maybe_table(self, request: web.Request, rtype: ResourceType, objects: list[dict[str, Any]],
                     rv: str) -> dict[str, Any] | None:
        if not tables.wants_table(request.headers.get("Accept", "")):
            return None
        return tables.to_table(rtype, objects, rv, request.query.get("includeObject", "Metadata"))

    # ---- verbs -----------------------------------------------------------------------------------
    def _get(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        obj = self.api.get(route.rtype, route.namespace, route.name)
        if route.sub == "scale":
            return _json(self._scale_of(route.rtype, obj))
        table = self._maybe_table(request, route.rtype, [obj], obj["metadata"].get("resourceVersion", ""))
        if table is None and "as=PartialObjectMetadata" in request.headers.get("Accept", ""):
            return _json(_partial(obj))
        return _json(table if table is not None else obj)

    def _list(self, request: web.Request, route: Route) -> web.Response:
        q = request.query
        options = listoptions.parse(q, watch=False)
        current = self.store.resource_version
        after = None
        if options.continue_token:
            token_rv, after = listoptions.decode_continue(options.continue_token)
            expired = self.store.too_old(token_rv)
            if expired is not None and expired.compacted:
                raise ApiError(410, "Expired", listoptions.CONTINUE_TOO_OLD,
                               metadata={"continue": listoptions.encode_continue(current, after)})
        elif options.resource_version and options.resource_version > current:
            raise listoptions.too_large(options.resource_version, current)
        exact = options.resource_version if options.match == listoptions.EXACT else None
        try:
            items, rv = self.api.list(route.rtype, route.namespace, q.get("labelSelector", ""),
                                      q.get("fieldSelector", ""), at=exact)
        except TooOldResourceVersion:
            raise ApiError(410, "Expired", listoptions.LIST_TOO_OLD) from None
        items, list_meta = _paginate(items, rv, q.get("limit", ""), after)
        table = self._maybe_table(request, route.rtype, items, str(rv))
        if table is not None:
            table["metadata"].update(list_meta)
            return _json(table)
        if "as=PartialObjectMetadataList" in request.headers.get("Accept", ""):
            return _json({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                          "metadata": list_meta, "items": [_partial(o) for o in items]})
        return _json({"kind": route.rtype.list_kind, "apiVersion": route.rtype.api_version,
                      "metadata": list_meta, "items": _list_items(route.rtype, items)})

    async def _create(self, request: web.Request, route: Route) -> web.Response:
        if route.rtype.group in (REVIEW_GROUP, AUTHENTICATION_GROUP):
            return await self._review(request, route)
        body = await self._body(request)
        warnings: list[str] = []
        if (route.rtype.group, route.rtype.kind) == ("certificates.k8s.io", "CertificateSigningRequest"):
            _csr_requestor(body, request.get(USER_KEY))
        obj = self.api.create(route.rtype, route.namespace, body, self._write_opts(request), warnings)
        return _json(obj, 201, self._warning_headers(warnings))

    async def _review(self, request: web.Request, route: Route) -> web.Response:
        """Access and token reviews: answered (201), never stored."""
        try:
            body = await self._body(request)
        except ApiError:
            if self.secure:
                raise
            body = {}  # today's non-secure answer does not depend on the body
        review = dict(body if isinstance(body, dict) else {}, apiVersion=route.rtype.api_version,
                      kind=route.rtype.kind)
        # non-secure mode: everyone is the admin
        user: auth.UserInfo = request.get(USER_KEY) or auth.UserInfo(auth.ADMIN_USER,
                                                                   (auth.MASTERS, auth.AUTHENTICATED))
        if route.rtype.kind == "TokenReview":
            return _json(self.authenticator.token_review(review), 201)
        if route.rtype.kind == "SelfSubjectRulesReview":
            namespace = str((review.get("spec") or {}).get("namespace") or "")
            if self.authorizer is None:
                everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
                review["status"] = {"resourceRules": [everything],
                                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                                    "incomplete": False}
            else:
                review["status"] = self.authorizer.rules_for(user, namespace)
            review.setdefault("metadata", {})
            return _json(review, 201)
        if route.rtype.kind == "SelfSubjectReview":
            review["status"] = {"userInfo": user.to_json()}
            review.setdefault("metadata", {})
            return _json(review, 201)
        review_namespace = route.namespace if route.rtype.kind == "LocalSubjectAccessReview" else None
        return _json(
            auth.access_review(route.rtype.kind, review, user, self.authorizer, review_namespace), 201
        )

    async def _update(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        body = await self._body(request)
        warnings: list[str] = []
        opts = self._write_opts(request)
        if route.sub == "scale":
            return _json(self._set_scale(route, body, opts))
        obj = self.api.update(route.rtype, route.namespace, route.name, body, route.sub, opts, warnings)
        return _json(obj, 200, self._warning_headers(warnings))

    async def _patch(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        raw = await request.read()
        opts = self._write_opts(request)
        warnings: list[str] = []
        ctype = request.headers.get("Content-Type", "")
        if route.sub == "scale":
            return _json(self._patch_scale(route, ctype, raw, opts))
        existed = self.store.peek(self.api.key(route.rtype, route.namespace, route.name)) is not None
        obj = self.api.patch(route.rtype, route.namespace, route.name, ctype, raw, route.sub, opts, warnings)
        # server-side apply can create: 201 Created then, as kube-apiserver answers
        return _json(obj, 200 if existed else 201, self._warning_headers(warnings))

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        options: dict[str, Any] = {}
        if raw.strip():
            body = decode_body(raw, _body_type(request))
            if not isinstance(body, dict):
                raise bad_request("DeleteOptions must be an object")
            options = body
        q = request.query
        if "propagationPolicy" in q:
            options["propagationPolicy"] = q["propagationPolicy"]
        if "orphanDependents" in q:
            options["orphanDependents"] = _flag(q["orphanDependents"])
        if "dryRun" in q:
            options["dryRun"] = q.getall("dryRun")
        return options

    async def _delete(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        if route.sub is not None:
            raise method_not_allowed()
        options = await self._delete_options(request)
        dry = "All" in (options.get("dryRun") or [])
        obj = self.api.delete(route.rtype, route.namespace, route.name, options, dry)
        return _json(self.api.delete_response(route.rtype, obj, dry), 200)

    async def _delete_collection(self, request: web.Request, route: Route) -> web.Response:
        options = await self._delete_options(request)
        dry = "All" in (options.get("dryRun") or [])
        q = request.query
        items, _ = self.api.list(route.rtype, route.namespace, q.get("labelSelector", ""),
                                 q.get("fieldSelector", ""))
        for obj in items:
            meta = obj["metadata"]
            try:
                self.api.delete(route.rtype, meta.get("namespace"), meta["name"], options, dry)
            except ApiError as e:
                if e.code != 404:
                    raise
        _, rv = self.api.list(route.rtype, route.namespace)
        return _json({"kind": route.rtype.list_kind, "apiVersion": route.rtype.api_version,
                      "metadata": {"resourceVersion": str(rv)}, "items": _list_items(route.rtype, items)})

    # ---- scale -----------------------------------------------------------------------------------
    @staticmethod
    def _scale_paths(rtype: ResourceType) -> tuple[str, str, str | None]:
        if rtype.scale:
            return (rtype.scale.get("specReplicasPath", ".spec.replicas"),
                    rtype.scale.get("statusReplicasPath", ".status.replicas"),
                    rtype.scale.get("labelSelectorPath"))
        return ".spec.replicas", ".status.replicas", None

    def _scale_of(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        spec_p, status_p, sel_p = self._scale_paths(rtype)
        spec_v = tables.jsonpath(obj, spec_p)
        status_v = tables.jsonpath(obj, status_p)
        meta = obj["metadata"]
        scale: dict[str, Any] = {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": spec_v[0] if spec_v else 0},
            "status": {"replicas": status_v[0] if status_v else 0},
        }
        if sel_p:
            sel = tables.jsonpath(obj, sel_p)
            if sel:
                scale["status"]["selector"] = sel[0]
        elif rtype.builtin:
            selector = (obj.get("spec") or {}).get("selector") or {}
            # a ReplicationController's selector is a plain map, the apps kinds' a LabelSelector
            match = selector if rtype.kind == "ReplicationController" else selector.get("matchLabels") or {}
            scale["status"]["selector"] = ",".join(f"{k}={v}" for k, v in match.items())
        return scale

    def _patch_scale(self, route: Route, content_type: str, raw: bytes, opts: WriteOptions) -> dict[str, Any]:
        """PATCH on /scale (``kubectl scale``): the patch applies to the Scale object, then to the owner."""
        kind = patch_kind(route.rtype, content_type)
        assert route.name is not None
        current = self._scale_of(route.rtype, self.api.get(route.rtype, route.namespace, route.name))
        body = decode_body(raw, content_type)
        try:
            if kind == "json":
                scale = patching.json_patch(current, body)
            elif kind == "apply":
                scale = patching.apply_patch(current, body if isinstance(body, dict) else {},
                                             opts.field_manager or "")
            else:  # merge; a Scale has no lists, so strategic merge is the same
                scale = patching.merge_patch(current, body)
        except patching.PatchError as e:
            raise ApiError(e.code, e.reason, e.message) from None
        return self._set_scale(route, scale, opts)

    def _set_scale(self, route: Route, scale: Any, opts: WriteOptions) -> dict[str, Any]:
        assert route.name is not None
        if not isinstance(scale, dict) or not isinstance(scale.get("spec") or {}, dict) or \
                not isinstance((scale.get("spec") or {}).get("replicas", 0), int):
            raise bad_request("Scale.spec.replicas must be an integer")
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        obj = self.api.get(route.rtype, route.namespace, route.name)
        want_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != obj["metadata"].get("resourceVersion"):
            raise conflict(route.rtype, route.name)
        spec_p, _, _ = self._scale_paths(route.rtype)
        target = obj
        keys = [k for k in spec_p.strip(".").split(".") if k]
        for k in keys[:-1]:
            target = target.setdefault(k, {})
        target[keys[-1]] = replicas
        obj["metadata"].pop("resourceVersion", None)
        updated = self.api.update(route.rtype, route.namespace, route.name, obj, None, opts)
        return self._scale_of(route.rtype, updated)

    # ---- watch -----------------------------------------------------------------------------------
    async def _watch(
        self, request: web.Request, route: Route, single: str | None = None
    ) -> web.StreamResponse:
        q = request.query
        rtype = route.rtype
        field_selector = q.get("fieldSelector", "")
        if single:
            field_selector = ",".join(filter(None, [field_selector, f"metadata.name={single}"]))
        accept = self.api.make_filter(rtype, q.get("labelSelector", ""), field_selector)
        options = listoptions.parse(q, watch=True)
        # "0", none, or sendInitialEvents (a watch-list): the current state first, then what follows
        since = None if options.send_initial_events else options.resource_version or None
        try:
            # an integer like the real parameter; 0 or unset means no client-chosen timeout
            timeout = int(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        except ValueError:
            raise bad_request(f"timeoutSeconds: invalid value {q['timeoutSeconds']!r}") from None
        if timeout is not None and timeout <= 0:
            timeout = None
        bookmarks = _flag(q.get("allowWatchBookmarks"))
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        as_partial = not as_table and "as=PartialObjectMetadata" in request.headers.get("Accept", "")
        include = q.get("includeObject", "Metadata")
        namespace = route.namespace if rtype.namespaced else None
        initial: list[dict[str, Any]] = []
        error_line: bytes | None = None
        watcher = None
        try:
            watcher, replay = self.store.watch(rtype.group_resource, namespace, since, accept)
        except TooOldResourceVersion as e:
            # compacted away (etcd's words), or out of the history's window (the watch cache's)
            message = listoptions.WATCH_TOO_OLD if e.compacted else str(e)
            status = ApiError(410, "Expired", message).status()
            error_line = _dumps({"type": "ERROR", "object": status}) + b"\n"
            replay = []
        if watcher is not None and since is None:
            # "Get State and Start at Most Recent": synthetic ADDED for what exists now, then live events
            for _, obj in self.store.items(rtype.group_resource, namespace):
                if accept is None or accept(obj):
                    initial.append(obj)
        # a client that accepts only protobuf gets length-delimited protobuf frames of the same events
        as_protobuf = (rtype.builtin and not as_table and not as_partial
                       and protobuf.accepts_only_protobuf(request.headers.get("Accept", "")))
        resp = web.StreamResponse(status=200, headers={
            "Content-Type": protobuf.WATCH_MEDIA_TYPE if as_protobuf else JSON, "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent_columns = False

        async def write(lines: bytes) -> None:
            await resp.write(protobuf.watch_frames(lines) if as_protobuf else lines)

        def encode(ev_type: str, obj: dict[str, Any], ev: Event | None = None) -> bytes:
            nonlocal sent_columns
            if conversion.converts(rtype):  # served in another shape than stored: no shared encoding
                obj, ev = conversion.from_storage(rtype, obj), None
            if as_table:
                presented = dict(obj, apiVersion=rtype.api_version, kind=rtype.kind)
                table = tables.to_table(
                    rtype,
                    [presented],
                    (obj.get("metadata") or {}).get("resourceVersion", ""),
                    include,
                    with_columns=not sent_columns,
                )
                sent_columns = True
                return _dumps({"type": ev_type, "object": table}) + b"\n"
            if as_partial:
                return _dumps({"type": ev_type, "object": _partial(obj)}) + b"\n"
            if ev is not None:
                return ev.encoded(ev_type, rtype.api_version)
            return _dumps({"type": ev_type, "object": dict(obj, apiVersion=rtype.api_version,
                                                           kind=rtype.kind)}) + b"\n"

        def translate(ev: Event) -> bytes | None:
            if accept is None:
                return encode(ev.type, ev.obj, ev)
            new_ok = accept(ev.obj)
            if ev.type == "MODIFIED":
                old_ok = ev.old is not None and accept(ev.old)
                if old_ok and new_ok:
                    return encode("MODIFIED", ev.obj, ev)
                if old_ok:
                    return encode("DELETED", ev.obj, ev)
                if new_ok:
                    return encode("ADDED", ev.obj, ev)
                return None
            return encode(ev.type, ev.obj, ev) if new_ok else None

        def bookmark(extra_annotations: dict[str, str] | None = None) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
            if extra_annotations:
                meta["annotations"] = extra_annotations
            return _dumps({"type": "BOOKMARK", "object": {"kind": rtype.kind, "apiVersion": rtype.api_version,
                                                          "metadata": meta}}) + b"\n"

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout is not None else None
        try:
            if error_line is not None:
                await write(error_line)
                return resp
            assert watcher is not None
            chunk = [encode("ADDED", o) for o in initial]
            for replayed in replay:
                line = translate(replayed)
                if line is not None:
                    chunk.append(line)
            if _flag(q.get("sendInitialEvents")) and bookmarks:
                chunk.append(bookmark({"k8s.io/initial-events-end": "true"}))
            if chunk:
                await write(b"".join(chunk))
            last_bookmark = loop.time()
            while True:
                now = loop.time()
                if deadline is not None and now >= deadline:
                    break
                wait = IDLE_CHECK
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if bookmarks:
                    wait = min(wait, max(0.0, last_bookmark + BOOKMARK_INTERVAL - now))
                try:
                    async with asyncio.timeout(max(wait, 0.001)):
                        ev = await watcher.queue.get()
                except TimeoutError:
                    transport = request.transport
                    if transport is None or transport.is_closing():
                        break
                    if bookmarks and loop.time() - last_bookmark >= BOOKMARK_INTERVAL:
                        await write(bookmark())
                        last_bookmark = loop.time()
                    continue
                if ev is None:  # closed: overflow or shutdown
                    break
                out = []
                line = translate(ev)
                if line is not None:
                    out.append(line)
                closed = False
                while not watcher.queue.empty():  # drain what is ready: one write for a burst
                    more = watcher.queue.get_nowait()
                    if more is None:
                        closed = True
                        break
                    line = translate(more)
                    if line is not None:
                        out.append(line)
                if out:
                    await write(b"".join(out))
                if closed:
                    break
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            if watcher is not None:
                self.store.close_watcher(watcher)
        try:
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError, RuntimeError):
            pass
        return resp


def build(data_dir: str | None = None) -> ApiServer:
    """Wire registry, store, api, lifecycle and HTTP app together."""
    from ansible_operator_sandbox.resources import CRD_GROUP_RESOURCE, Registry
    registry = Registry()
    store = Store(data_dir)
    for _, crd in store.items(CRD_GROUP_RESOURCE):
        registry.set_crd(crd)
    api = Api(registry, store)
    lifecycle = Lifecycle(registry, store)
    api.lifecycle = lifecycle
    return ApiServer(api, lifecycle)
