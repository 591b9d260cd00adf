"""The verbs (get, list, create, update, patch, delete) with kube-apiserver's semantics, independent of HTTP.

This is where metadata rules live: uid/creationTimestamp/generateName on create, optimistic concurrency
(409 Conflict on a stale resourceVersion), generation bumps only for spec changes, status subresource
isolation, no-op writes that keep the resourceVersion, CRD schema pruning/defaulting/validation (422 with
causes), and namespace admission (404 for a missing namespace, 403 while it terminates). Deletion and
garbage collection are delegated to :mod:`lifecycle`.
"""

from __future__ import annotations

import builtins
import copy
import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import yaml

from ansible_operator_sandbox import (
    builtin_schemas,
    conversion,
    crdcheck,
    kinds,
    labels,
    managedfields,
    nodeports,
    objectmeta,
    patching,
    protobuf,
    schema,
    selectors,
)
from ansible_operator_sandbox.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    namespace_not_found,
    no_containers,
    not_found,
    path_not_found,
    request_entity_too_large,
    success_status,
    unsupported_media_type,
    unsupported_patch_route,
)
from ansible_operator_sandbox.resources import CRD_GROUP_RESOURCE, Registry, ResourceType
from ansible_operator_sandbox.store import Key, Store
from ansible_operator_sandbox.timeutil import now_rfc3339

log = logging.getLogger(__name__)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: kinds whose names must be DNS labels (63 chars), as in kube-apiserver
_LABEL_NAMED = {("", "Namespace"), ("", "Service")}
#: kinds whose names are path segments only (RBAC allows ':' etc.)
_PATH_NAMED = {
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiregistration.k8s.io", "APIService"),  # "<version>.<group>": "v1." for the core group
}

#: built-in kinds whose registry sets ``ReturnDeletedObject: true`` (k8s.io/kubernetes pkg/registry/*/storage;
#: the published OpenAPI's DELETE responses say the same): a DELETE that removes one answers the deleted
#: object,
#: every other built-in answers a ``Status``; custom resources always answer the object
#: (apiextensions-apiserver's
#: customresource store)
RETURNS_DELETED_OBJECT = frozenset({
    "/pods", "/services", "/serviceaccounts", "/persistentvolumes", "/persistentvolumeclaims",
    "/resourcequotas", "/podtemplates", "storage.k8s.io/storageclasses", "storage.k8s.io/volumeattachments",
    "storage.k8s.io/csidrivers", "storage.k8s.io/csinodes",
})

#: subresources that reach a kubelet or a container on a real cluster: (group/resource, subresource)
CONTAINER_SUBRESOURCES = frozenset({
    ("/pods", "log"), ("/pods", "exec"), ("/pods", "attach"), ("/pods", "portforward"), ("/pods", "proxy"),
    ("/services", "proxy"), ("/nodes", "proxy"),
})
#: the most a request body may hold (kube-apiserver's MaxRequestBodyBytes default, 3 MiB)
MAX_REQUEST_BYTES = 3 * 1024 * 1024
#: the deepest JSON/YAML nesting accepted (Go's decoder allows 10000; deeper than any real object needs)
MAX_DEPTH = 200
#: body media types the server decodes; anything else (text/plain, CBOR: off in kube-apiserver 1.36) is 415
_DECODABLE = ("json", "yaml", "protobuf")

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
#: what a custom resource's PATCH accepts (apiextensions-apiserver: no strategic merge; CBOR is off)
_CR_PATCH_TYPES = (
    "application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def patch_kind(rtype: ResourceType, content_type: str) -> str:
    """The patch kind (``json``, ``merge``, ``strategic``, ``apply``) a PATCH's Content-Type names, or the 415
    kube-apiserver answers before looking at the object: a built-in kind's route accepts only the four patch
    types (none, ``application/json`` or ``apply-patch+cbor`` -- CBOR is off -- are refused with go-restful's
    message); a custom resource's handler (k8s.io/apiserver handlers/patch.go) names the three it takes."""
    ctype = content_type.split(";")[0].strip().lower()
    kind = PATCH_TYPES.get(ctype)
    if rtype.builtin:
        if kind is None:
            raise unsupported_patch_route()
    elif ctype not in _CR_PATCH_TYPES:
        raise unsupported_media_type(ctype, ", ".join(_CR_PATCH_TYPES))
    assert kind is not None
    return kind


#: Field labels of the kinds that register a conversion function for them (their GetAttrs; an unknown one
#: is "field label not supported: <field>"), besides metadata.name and metadata.namespace
FIELD_LABELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                  "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                  "status.nominatedNodeName"),
    ("", "Event"): ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                    "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                    "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    ("", "Secret"): ("type",),
    ("", "Namespace"): ("status.phase",),
    ("", "Node"): ("spec.unschedulable",),
    ("", "ReplicationController"): ("status.replicas",),
    ("apps", "ReplicaSet"): ("status.replicas",),
    ("batch", "Job"): ("status.successful",),
    ("certificates.k8s.io", "CertificateSigningRequest"): ("spec.signerName",),
}
#: Built-in kinds with no conversion function: runtime.DefaultMetaV1FieldSelectorConversion answers
METADATA_ONLY_FIELDS = frozenset({
    ("", "ConfigMap"), ("", "ServiceAccount"), ("coordination.k8s.io", "Lease"),
    ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("scheduling.k8s.io", "PriorityClass"),
})


def _check_default_field_labels(field_selector: str) -> None:
    """DefaultMetaV1FieldSelectorConversion's refusal, word for word."""
    for term in field_selector.split(","):
        field = re.split(r"!=|==|=", term, maxsplit=1)[0].strip()
        if field and field not in ("metadata.name", "metadata.namespace"):
            raise labels.SelectorError(
                f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"')


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_manager: str | None = None
    user_agent: str = ""  # names the manager of a write without fieldManager (as kube-apiserver)
    force: bool = False
    field_validation: str = ""  # "", "Ignore", "Warn", "Strict"


def decode_body(raw: bytes, content_type: str = "application/json") -> Any:
    """JSON (or YAML for apply patches / YAML bodies) → Python; 400 BadRequest when malformed."""
    if len(raw) > MAX_REQUEST_BYTES:
        raise request_entity_too_large(MAX_REQUEST_BYTES)
    if not raw.strip():
        raise bad_request("the request body is empty")
    ct = content_type.split(";")[0].strip().lower()
    if ct and not any(t in ct for t in _DECODABLE):
        raise unsupported_media_type(ct)
    if "protobuf" in ct:
        try:
            return protobuf.decode(raw)
        except protobuf.UnsupportedKind as e:  # custom resources have no protobuf form
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - "
                f"accepted media types include: application/json, application/yaml ({e})",
            ) from None
        except protobuf.ProtobufError as e:
            raise bad_request(f"the body of the request could not be decoded: {e}") from None
    try:
        body = _load_yaml(raw) if "yaml" in ct else json.loads(raw)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        raise bad_request(f"the body of the request could not be decoded: {e}") from None
    if _depth_exceeds(body, MAX_DEPTH):
        raise bad_request(f"the body of the request could not be decoded: exceeded max depth ({MAX_DEPTH})")
    return body


#: libyaml's loader where PyYAML has it (the pure-Python one takes seconds on hostile nesting)
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: the most nodes a YAML body may expand to through its aliases (go-yaml refuses "excessive aliasing" too)
MAX_YAML_NODES = 1_000_000


def _load_yaml(raw: bytes) -> Any:
    """A YAML body, checked on its event stream before any object is built: nesting deeper than
    ``MAX_DEPTH`` and aliases expanding past ``MAX_YAML_NODES`` (a "billion laughs") are refused at the cost
    of one scan, instead of building and walking the expanded object."""
    sizes: dict[str, int] = {}  # anchor -> nodes its value expands to
    stack: list[tuple[str | None, int]] = [(None, 0)]  # (anchor, nodes so far) per open collection
    total = 0  # nodes of the document with every alias expanded
    for event in yaml.parse(raw, Loader=_YAML_LOADER):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) > MAX_DEPTH:
                raise ValueError(f"exceeded max depth ({MAX_DEPTH})")
            stack.append((event.anchor, 1))
            total += 1
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, nodes = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, nodes = event.anchor, 1
            total += 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, nodes = None, sizes.get(event.anchor or "", 1)
            total += nodes
        else:
            continue
        if anchor is not None:
            sizes[anchor] = nodes
        stack[-1] = (stack[-1][0], stack[-1][1] + nodes)
        if total > MAX_YAML_NODES:
            raise ValueError(f"the document contains excessive aliasing (more than {MAX_YAML_NODES} nodes)")
    return yaml.load(raw, Loader=_YAML_LOADER)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects/arrays deeper than ``limit`` (iterative: no recursion on hostile
    input)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def qualified_kind(rtype: ResourceType) -> str:
    return f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind


def strip_for_compare(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def spec_part(obj: dict[str, Any], with_status: bool = False) -> dict[str, Any]:
    """What a generation bump is decided on: everything but metadata (and status, unless ``with_status``)."""
    skip = ("metadata", "apiVersion", "kind") if with_status else ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


def _shape(rtype: ResourceType) -> managedfields.Shape:
    return managedfields.Shape(rtype.kind, None if rtype.builtin else (rtype.schema or {}), rtype.has_status)


def _owners(entries: Any) -> list[Any]:
    """managedFields without timestamps: what decides whether an apply changed ownership."""
    return [{k: v for k, v in e.items() if k != "time"} for e in entries or [] if isinstance(e, dict)]


class Api:
    """Verb semantics over a :class:`Store`; ``lifecycle`` (deletion/GC) is attached after construction."""

    def __init__(self, registry: Registry, store: Store) -> None:
        self.registry = registry
        self.store = store
        self.lifecycle: Any = None  # lifecycle.Lifecycle, set by the server (avoids an import cycle)

    # ---- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def key(rtype: ResourceType, namespace: str | None, name: str) -> Key:
        # a namespaced key without a namespace is the caller's bug; kept as is (no behaviour change here)
        return (rtype.group_resource, namespace if rtype.namespaced else "", name)  # type: ignore[return-value]

    @staticmethod
    def present(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """An object as served for ``rtype``'s version: converted from the stored version where the shapes
        differ (:mod:`conversion`), otherwise the same fields under that apiVersion."""
        obj = conversion.from_storage(rtype, obj)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        return obj

    def _as_sent(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` (stored) in the request's version: field ownership is recorded in that version's fields."""
        return self.present(rtype, copy.deepcopy(obj)) if conversion.converts(rtype) else obj

    def _stored_as(self, rtype: ResourceType) -> ResourceType:
        """The type of the stored objects (another version of ``rtype`` where conversion applies)."""
        version = conversion.storage_version(rtype)
        if version is None or version == rtype.version:
            return rtype
        return self.registry.get(rtype.group, version, rtype.plural) or rtype

    def _require(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.store.get(self.key(rtype, namespace, name))
        if obj is None:
            raise not_found(rtype, name)
        return obj

    def check_namespace_for_create(self, rtype: ResourceType, namespace: str | None, name: str) -> None:
        if not rtype.namespaced:
            return
        ns = self.store.peek(("/namespaces", "", namespace or ""))
        if ns is None:
            raise namespace_not_found(namespace or "")
        if (ns.get("metadata") or {}).get("deletionTimestamp"):
            raise forbidden(
                rtype,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    def _invalid(self, rtype: ResourceType, name: str, errors: list[schema.FieldError]) -> ApiError:
        return invalid(rtype, name, [e.cause() for e in errors],
                       schema.invalid_message(qualified_kind(rtype), name, errors))

    def _check_name(self, rtype: ResourceType, name: str) -> None:
        if (rtype.group, rtype.kind) in _PATH_NAMED:
            ok = name not in (".", "..") and "/" not in name and "%" not in name
            detail = "may not contain '/' or '%'"
        elif (rtype.group, rtype.kind) in _LABEL_NAMED:
            ok = len(name) <= 63 and bool(_DNS_LABEL.match(name))
            # apimachinery's IsDNS1123Label / IsDNS1123Subdomain messages, examples and regex included
            detail = (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
                "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            )
        else:
            ok = len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))
            detail = labels.SUBDOMAIN_ERR
        if not ok:
            raise self._invalid(rtype, name, [schema.invalid("metadata.name", name, detail)])

    def _check_body_identity(self, rtype: ResourceType, body: Any, namespace: str | None,
                             name: str | None = None) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request was not a JSON object: {type(body).__name__}")
        kinds.check_metadata(body)
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        if api_version not in (None, "") and api_version != rtype.api_version:
            # another served version of the same resource is fine (no conversion needed without webhooks)
            group = api_version.rpartition("/")[0]
            if group != rtype.group or self.registry.get(group, api_version.rpartition("/")[2],
                                                         rtype.plural) is None:
                raise bad_request(
                    f"the API version in the data ({api_version}) does not match the expected API "
                    f"version ({rtype.api_version})"
                )
        if kind not in (None, "") and kind != rtype.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rtype.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") not in (None, "", name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if name is not None:
            meta["name"] = name
        kinds.check_metadata(body)
        return body

    def _crd_schema_pipeline(self, rtype: ResourceType, obj: dict[str, Any], opts: WriteOptions,
                             warnings: list[str]) -> dict[str, Any]:
        """Prune, default, validate a custom resource against its version's schema; prune a built-in kind."""
        if rtype.builtin:
            pruned, walk = builtin_schemas.prune(rtype.group, rtype.version, rtype.kind, obj)
            if walk.type_error:  # the typed decoder fails before any field validation
                raise bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                                  f'{rtype.kind}: {walk.type_error}')
            self._unknown_fields(rtype, walk.unknown, opts, warnings)
            return pruned
        if not rtype.schema:
            return obj
        try:
            return self._schema_steps(rtype, obj, opts, warnings)
        except (TypeError, AttributeError, KeyError, ValueError) as e:
            # a schema the CRD checks let through but the pipeline cannot apply: refuse the object, keep
            # serving
            log.exception("sandbox: applying the %s schema failed", rtype.qualified)
            name = (obj.get("metadata") or {}).get("name", "")
            err = schema.invalid("", name, f"the CustomResourceDefinition schema could not be applied: {e}")
            raise self._invalid(rtype, name, [err]) from None

    def _schema_steps(self, rtype: ResourceType, obj: dict[str, Any], opts: WriteOptions,
                      warnings: list[str]) -> dict[str, Any]:
        assert rtype.schema is not None
        pruned = schema.prune(rtype.schema, obj)
        self._unknown_fields(rtype, _unknown_fields(obj, pruned), opts, warnings)
        obj = schema.apply_defaults(rtype.schema, pruned)
        errors = schema.validate(rtype.schema, obj)
        if errors:
            raise self._invalid(rtype, (obj.get("metadata") or {}).get("name", ""), errors)
        return obj

    @staticmethod
    def _unknown_fields(
        rtype: ResourceType, unknown: list[str], opts: WriteOptions, warnings: list[str]
    ) -> None:
        """fieldValidation: Strict → 400, Warn (the apiserver's default when unset) → warnings, Ignore →
        nothing."""
        if not unknown or opts.field_validation == "Ignore":
            return
        if opts.field_validation == "Strict":
            raise bad_request(f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                              f'{rtype.kind}: strict decoding error: '
                              + ", ".join(f'unknown field "{u}"' for u in unknown))
        warnings.extend(f'unknown field "{u}"' for u in unknown)

    def _node_ports(self, rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A Service's node ports (:mod:`nodeports`), unique among every other stored Service."""
        if rtype.group_resource != "/services":
            return
        meta = obj["metadata"]
        key = self.key(rtype, meta.get("namespace"), meta.get("name", ""))
        used = nodeports.ports_in_use(svc for k, svc in self.store.items("/services") if k != key)
        errors = nodeports.assign(obj, old, used)
        if errors:
            raise self._invalid(rtype, meta.get("name", ""), errors)

    def _check_crd(self, rtype: ResourceType, obj: dict[str, Any]) -> None:
        if rtype.group_resource != CRD_GROUP_RESOURCE:
            return
        errors = crdcheck.shape_errors(obj)
        if not errors:
            try:
                errors = schema.validate_crd(obj)
            except (TypeError, AttributeError, KeyError, ValueError, RecursionError) as e:
                # a schema too malformed for the structural checks themselves: refuse it, keep serving
                log.warning("sandbox: CRD validation could not process %s: %s",
                            (obj.get("metadata") or {}).get("name"), e)
                errors = [schema.invalid("spec.versions", "<schema>", f"not a structural schema: {e}")]
        if errors:
            raise self._invalid(rtype, (obj.get("metadata") or {}).get("name", ""), errors)
        # a second CRD may not claim a group/plural another CRD serves
        spec = obj.get("spec") or {}
        for t in self.registry.by_group_resource(
            f"{spec.get('group')}/{(spec.get('names') or {}).get('plural')}"
        ):
            if t.builtin:
                err = schema.invalid("spec.names.plural", (spec.get("names") or {}).get("plural"),
                                     "conflicts with a built-in resource")
                raise self._invalid(rtype, obj["metadata"].get("name", ""), [err])
        obj["status"] = kinds.crd_status(obj)

    # ---- reads -----------------------------------------------------------------------------------
    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        return self.present(rtype, self._require(rtype, namespace, name))

    def list(self, rtype: ResourceType, namespace: str | None, label_selector: str = "",
             field_selector: str = "", at: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """The objects now, or ``at`` a past resourceVersion (``resourceVersionMatch=Exact``; raises
        TooOldResourceVersion when the history no longer reaches back to it), and the list's version."""
        accept = self.make_filter(rtype, label_selector, field_selector)
        where = namespace if rtype.namespaced else None
        stored = (self.store.items(rtype.group_resource, where) if at is None
                  else self.store.items_at(rtype.group_resource, where, at))
        items = []
        for _, obj in stored:
            if accept is None or accept(obj):
                items.append(self.present(rtype, copy.deepcopy(obj)))
        return items, self.store.resource_version if at is None else at

    def make_filter(self, rtype: ResourceType, label_selector: str, field_selector: str
                    ) -> Callable[[dict[str, Any]], bool] | None:
        """A predicate for list/watch, or None when nothing is selected on. Bad selectors → 400."""
        checks: list[Callable[[dict[str, Any]], bool]] = []
        try:
            if label_selector:
                lsel = labels.parse_label_selector(label_selector)
                checks.append(lambda o: lsel((o.get("metadata") or {}).get("labels") or {}))
            if field_selector:
                if rtype.builtin and (rtype.group, rtype.kind) in METADATA_ONLY_FIELDS:
                    _check_default_field_labels(field_selector)
                allowed = (None if rtype.builtin and (rtype.group, rtype.kind) not in FIELD_LABELS
                           else {"metadata.name", "metadata.namespace",
                                 *FIELD_LABELS.get((rtype.group, rtype.kind), ())})
                checks.append(selectors.parse_field_selector(field_selector, allowed))
        except labels.SelectorError as e:
            raise bad_request(str(e)) from None
        if not checks:
            return None
        return lambda o: all(c(o) for c in checks)

    # ---- create ----------------------------------------------------------------------------------
    def create(self, rtype: ResourceType, namespace: str | None, body: Any, opts: WriteOptions | None = None,
               warnings: builtins.list[str] | None = None, *, applied: bool = False) -> dict[str, Any]:
        opts = opts or WriteOptions()
        warnings = warnings if warnings is not None else []
        obj = self._check_body_identity(rtype, copy.deepcopy(body), namespace)
        meta = obj["metadata"]
        name = meta.get("name")
        if not name:
            gen = meta.get("generateName")
            if not gen:
                err = schema.required("metadata.name", "name or generateName is required")
                raise self._invalid(rtype, "", [err])
            for _ in range(20):
                name = gen + objectmeta.random_suffix()
                if self.store.peek(self.key(rtype, meta.get("namespace"), name)) is None:
                    break
            meta["name"] = name
        self._check_name(rtype, name)
        ns = meta.get("namespace") if rtype.namespaced else None
        self.check_namespace_for_create(rtype, ns, name)
        key = self.key(rtype, ns, name)
        if self.store.peek(key) is not None:
            raise already_exists(rtype, name)
        if rtype.has_status and rtype.group_resource != "/namespaces":
            obj.pop("status", None)
            if rtype.builtin:  # built-in kinds come back with an empty status, custom resources without
                obj["status"] = kinds.initial_status(rtype)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                  "selfLink"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if kinds.has_generation(rtype):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        obj = self._crd_schema_pipeline(rtype, obj, opts, warnings)
        obj = conversion.to_storage(rtype, obj)
        kinds.normalize(self._stored_as(rtype), obj, None)
        self._node_ports(rtype, obj, None)
        self._check_crd(rtype, obj)
        manager = managedfields.manager_name(opts.field_manager, opts.user_agent)
        obj["metadata"]["managedFields"] = (
            managedfields.created_by_apply(body, manager, rtype.api_version, _shape(rtype)) if applied else
            managedfields.record_update(None, self._as_sent(rtype, obj), manager, rtype.api_version, None,
                                        _shape(rtype)))
        if self.lifecycle is not None:
            self.lifecycle.on_create(rtype, obj)
        if opts.dry_run:
            return self.present(rtype, obj)
        stored = self.store.put(key, obj)
        return self.present(rtype, copy.deepcopy(stored))

    # ---- update ----------------------------------------------------------------------------------
    def update(self, rtype: ResourceType, namespace: str | None, name: str, body: Any,
               subresource: str | None = None, opts: WriteOptions | None = None,
               warnings: builtins.list[str] | None = None) -> dict[str, Any]:
        opts = opts or WriteOptions()
        new = self._check_body_identity(rtype, copy.deepcopy(body), namespace, name)
        old = self._require(rtype, namespace, name)
        want_rv = new["metadata"].get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != old["metadata"].get("resourceVersion"):
            raise conflict(rtype, name)
        return self._write(rtype, old, new, subresource, opts, warnings if warnings is not None else [])

    def _write(
        self,
        rtype: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str | None,
        opts: WriteOptions,
        warnings: builtins.list[str],
        managed: builtins.list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Common tail of update and patch: merge the rules of what may change, then store (or not)."""
        name = old["metadata"]["name"]
        old_meta = old["metadata"]
        stored_as = self._stored_as(rtype)
        # the request's version of the stored object, for what the request leaves as it was
        view = conversion.from_storage(rtype, copy.deepcopy(old)) if stored_as is not rtype else old
        if subresource == "approval":  # CertificateSigningRequest approval: a status write (conditions)
            subresource = "status"
        if subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(view)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource == "ephemeralcontainers":  # pods: only spec.ephemeralContainers, and only added to
            wanted = (new.get("spec") or {}).get("ephemeralContainers") or []
            new = copy.deepcopy(view)
            existing = (view.get("spec") or {}).get("ephemeralContainers") or []
            if not isinstance(wanted, list):
                wanted = []
            kept = {c.get("name"): c for c in wanted if isinstance(c, dict)}
            removed = [c.get("name", "") for c in existing if c.get("name") not in kept]
            changed = [c.get("name", "") for c in existing
                       if c.get("name") in kept and kept[c.get("name")] != c]
            for names, verb in ((removed, "removed"), (changed, "changed")):
                if names:  # ValidatePodEphemeralContainersUpdate's wording (the newline is its own)
                    quoted = ", ".join(json.dumps(n) for n in names)
                    raise self._invalid(rtype, name, [schema.forbidden(
                        "spec.ephemeralContainers",
                        f"existing ephemeral containers {quoted} may not be {verb}\n")])
            new.setdefault("spec", {})["ephemeralContainers"] = wanted
        elif subresource in (None, "finalize"):
            if subresource == "finalize":  # namespaces: only spec.finalizers may change
                spec = new.get("spec")
                new = copy.deepcopy(view)
                new["spec"] = spec if isinstance(spec, dict) else {}
            if not isinstance(new.get("metadata"), dict):
                raise bad_request("metadata must be an object")
            if rtype.has_status and rtype.group_resource not in ("/namespaces",):
                if "status" in view:
                    new["status"] = view["status"]
                else:
                    new.pop("status", None)
        else:
            raise bad_request(f"unsupported subresource {subresource!r}")
        meta = new["metadata"]
        sent_managed = meta.get("managedFields") if managed is None else None
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace",
                  "name", "generation"):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        new["apiVersion"] = rtype.api_version
        new["kind"] = rtype.kind
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                err = schema.forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is "
                    "being deleted, found new finalizers " + json.dumps(sorted(added)),
                )
                raise self._invalid(rtype, name, [err])
        if subresource != "status" or rtype.builtin:  # a built-in's body is always decoded into its Go type
            new = self._crd_schema_pipeline(rtype, new, opts, warnings)
        elif not rtype.builtin and rtype.schema:
            # status writes are validated too, but only status may differ from the stored object
            errors = schema.validate(
                rtype.schema, schema.apply_defaults(rtype.schema, schema.prune(rtype.schema, new))
            )
            if errors:
                raise self._invalid(rtype, name, errors)
            new = schema.apply_defaults(rtype.schema, schema.prune(rtype.schema, new))
        new = conversion.to_storage(rtype, new)
        kinds.normalize(stored_as, new, old)
        if subresource is None:
            kinds.check_update(stored_as, new, old)
        self._node_ports(rtype, new, old)
        meta = new["metadata"]  # the pipeline above returns new objects
        if rtype.group_resource == CRD_GROUP_RESOURCE:
            new["status"] = old.get("status")
            self._check_crd(rtype, new)
        # custom resources without a status subresource count status changes too (as kube-apiserver does)
        with_status = not rtype.builtin and not rtype.has_status
        if kinds.has_generation(rtype) and spec_part(new, with_status) != spec_part(old, with_status):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        if managed is None:
            manager = managedfields.manager_name(opts.field_manager, opts.user_agent)
            managed = managedfields.record_update(
                self._as_sent(rtype, old),
                self._as_sent(rtype, new),
                manager,
                rtype.api_version,
                "status" if subresource == "status" else None,
                _shape(rtype),
                sent_managed if sent_managed != old_meta.get("managedFields") else None,
            )
        meta["managedFields"] = managed
        if strip_for_compare(new) == strip_for_compare(self.present(stored_as, copy.deepcopy(old))) and \
                _owners(managed) == _owners(old_meta.get("managedFields")):
            return self.present(rtype, old)  # no-op: same resourceVersion, no event
        if opts.dry_run:
            meta["resourceVersion"] = old_meta.get("resourceVersion")
            return self.present(rtype, new)
        key = self.key(rtype, old_meta.get("namespace"), name)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and rtype.group_resource != "/namespaces"
        ):
            final = self.store.remove(key)
            assert final is not None
            return self.present(rtype, copy.deepcopy(final))
        stored = self.store.put(key, new)
        return self.present(rtype, copy.deepcopy(stored))

    # ---- patch -----------------------------------------------------------------------------------
    def patch(self, rtype: ResourceType, namespace: str | None, name: str, content_type: str, raw: bytes,
              subresource: str | None = None, opts: WriteOptions | None = None,
              warnings: builtins.list[str] | None = None) -> dict[str, Any]:
        opts = opts or WriteOptions()
        warnings = warnings if warnings is not None else []
        kind = patch_kind(rtype, content_type)
        body = decode_body(raw, content_type)
        if kind == "apply":
            if not opts.field_manager:
                raise bad_request("PATCH /apply: fieldManager is required for apply requests")
            if not isinstance(body, dict):
                raise bad_request("apply patch must be an object")
        elif kind == "json":
            if not isinstance(body, list):
                raise bad_request("json patch must be an array of operations")
        elif not isinstance(body, dict):
            raise bad_request("merge patch must be a JSON object")
        current = self.store.get(self.key(rtype, namespace, name))
        if current is None:
            if kind == "apply" and subresource is None:
                kinds.check_metadata(body)
                return self.create(rtype, namespace, dict(body, metadata=dict(body.get("metadata") or {},
                                                                              name=name)), opts, warnings,
                                   applied=True)
            raise not_found(rtype, name)
        stored = current
        current = self.present(rtype, copy.deepcopy(current) if conversion.converts(rtype) else current)
        try:
            if kind == "json":
                patched = patching.json_patch(current, body)
            elif kind == "merge":
                patched = patching.merge_patch(current, body)
            elif kind == "strategic":
                patched = patching.strategic_merge_patch(current, body, rtype.kind)
            else:
                patched = patching.apply_patch(current, body, opts.field_manager or "",
                                               None if rtype.builtin else (rtype.schema or {}))
        except patching.PatchError as e:
            if e.code == 409:
                raise conflict(rtype, name, e.message) from None
            if e.code == 400:
                raise bad_request(e.message) from None
            if e.bare:
                raise ApiError(e.code, e.reason, e.message, {}) from None
            raise ApiError(
                e.code,
                e.reason,
                e.message,
                {
                    "name": name,
                    "group": rtype.group,
                    "kind": rtype.kind,
                    "causes": [{"reason": "FieldValueInvalid", "message": e.message, "field": ""}],
                },
            ) from None
        if not isinstance(patched, dict):
            raise bad_request("the patch produced a non-object")
        want_rv = (
            (patched.get("metadata") or {}).get("resourceVersion")
            if isinstance(patched.get("metadata"), dict)
            else None
        )
        if want_rv not in (None, "") and str(want_rv) != current["metadata"].get("resourceVersion"):
            raise conflict(rtype, name)
        managed = None
        if kind == "apply":
            patched = managedfields.apply(current, patched, body, opts.field_manager or "", opts.force,
                                          rtype.api_version, "status" if subresource == "status" else None,
                                          _shape(rtype))
            managed = patched["metadata"].pop("managedFields")
        patched = self._check_body_identity(rtype, patched, namespace, name)
        old = stored if conversion.converts(rtype) else current
        return self._write(rtype, old, patched, subresource, opts, warnings, managed)

    # ---- delete ----------------------------------------------------------------------------------
    def delete(self, rtype: ResourceType, namespace: str | None, name: str, options: dict[str, Any],
               dry_run: bool = False) -> dict[str, Any]:
        obj = self._require(rtype, namespace, name)
        pre = options.get("preconditions") or {}
        if not isinstance(pre, dict):
            raise bad_request("DeleteOptions.preconditions must be an object")
        if pre.get("uid") and pre["uid"] != obj["metadata"].get("uid"):
            raise conflict(
                rtype,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object "
                f"meta: {obj['metadata'].get('uid')}",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != obj["metadata"].get(
            "resourceVersion"
        ):
            raise conflict(rtype, name, "Precondition failed: ResourceVersion in precondition: "
                                        f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                        f"{obj['metadata'].get('resourceVersion')}")
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Background", "Foreground", "Orphan"):
            err = schema.not_supported("propagationPolicy", policy, ["Foreground", "Background", "Orphan"])
            raise ApiError(422, "Invalid", f"DeleteOptions.meta.k8s.io \"\" is invalid: {err}",
                           {"causes": [err.cause()]})
        if dry_run:
            return self.present(rtype, obj)
        result = self.lifecycle.delete(rtype, self.key(rtype, namespace, name), policy or "Background")
        return self.present(rtype, result)

    def evict(self, rtype: ResourceType, namespace: str | None, name: str, body: Any,
              opts: WriteOptions) -> dict[str, Any]:
        """POST pods/<name>/eviction: delete the Pod unless a PodDisruptionBudget selecting it allows no
        disruption (429 as the eviction REST does); the budget's ``disruptionsAllowed`` is spent at once."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        meta = found if isinstance(found := body.get("metadata"), dict) else {}
        if meta.get("name") not in (None, "", name):
            raise bad_request("name in URL does not match name in Eviction object")
        pod = self._require(rtype, namespace, name)
        options = found if isinstance(found := body.get("deleteOptions"), dict) else {}
        phase = (pod.get("status") or {}).get("phase")
        pod_labels = (pod.get("metadata") or {}).get("labels") or {}
        pdb_type = self.registry.get("policy", "v1", "poddisruptionbudgets")
        budgets = [] if pdb_type is None or phase in ("Succeeded", "Failed", "Pending") else [
            b for _, b in self.store.items("policy/poddisruptionbudgets", namespace)
            if labels.matches_label_selector((b.get("spec") or {}).get("selector"), pod_labels)]
        if len(budgets) > 1:
            raise ApiError(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if budgets and not opts.dry_run:
            pdb = copy.deepcopy(budgets[0])
            status = pdb.get("status") or {}
            if int(status.get("disruptionsAllowed") or 0) <= 0:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": (
                                    f"The disruption budget {pdb['metadata']['name']} needs "
                                    f"{status.get('desiredHealthy', 0)} healthy pods and has "
                                    f"{status.get('currentHealthy', 0)} currently"
                                ),
                            }
                        ]
                    },
                )
            status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
            status.setdefault("disruptedPods", {})[name] = now_rfc3339()
            pdb["status"] = status
            assert pdb_type is not None
            self.update(pdb_type, namespace, pdb["metadata"]["name"], pdb, "status", opts)
        self.delete(rtype, namespace, name, options, opts.dry_run)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def refuse_subresource(
        self, rtype: ResourceType, namespace: str | None, name: str | None, sub: str
    ) -> None:
        """Raise for a subresource the sandbox does not serve: a clear Status for the ones that need
        containers
        (log, exec, attach, portforward, proxy) once the object exists, a plain 404 for anything else."""
        if (rtype.group_resource, sub) not in CONTAINER_SUBRESOURCES or name is None:
            raise path_not_found()
        self._require(rtype, namespace, name)
        raise no_containers(rtype, name, sub)

    def delete_response(
        self, rtype: ResourceType, obj: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        """The body of a DELETE answer: the object (still there with ``deletionTimestamp``, a dry run, a
        custom
        resource or a kind whose registry returns it) or a ``Status`` of kind Success."""
        meta = obj.get("metadata") or {}
        gone = self.store.peek(self.key(rtype, meta.get("namespace"), meta.get("name", ""))) is None
        if dry_run or not gone or not rtype.builtin or rtype.group_resource in RETURNS_DELETED_OBJECT:
            return obj
        return success_status(rtype, meta.get("name", ""), meta.get("uid"))


def _unknown_fields(before: Any, after: Any, path: str = "") -> list[str]:
    """Dotted paths present in ``before`` but pruned from ``after`` (for fieldValidation Strict/Warn)."""
    out: list[str] = []
    if isinstance(before, dict) and isinstance(after, dict):
        for k, v in before.items():
            p = f"{path}.{k}" if path else k
            if k not in after:
                out.append(p)
            elif path or k not in ("metadata", "apiVersion", "kind"):
                out.extend(_unknown_fields(v, after[k], p))
    elif isinstance(before, list) and isinstance(after, list):
        for i, (b, a) in enumerate(zip(before, after)):
            out.extend(_unknown_fields(b, a, f"{path}[{i}]"))
    return out
