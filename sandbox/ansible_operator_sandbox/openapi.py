"""Published OpenAPI documents: ``/openapi/v2`` and ``/openapi/v3`` (root + one document per group/version).

Schemas come from :mod:`builtin_schemas` (Kubernetes' own spec for the built-in kinds) and from each CRD's
``openAPIV3Schema`` (named and shaped as kube-apiserver publishes them: ``com.example.v1.Widget`` with
``x-kubernetes-group-version-kind``, ``metadata`` referencing ObjectMeta). So ``kubectl explain`` works for
both, and kubectl computes strategic merge patches from the real ``x-kubernetes-patch-*`` extensions.

Paths list every served resource with its operations and ``x-kubernetes-group-version-kind``; the PATCH
operation declares the ``fieldValidation`` query parameter, which is what kubectl (1.27+) checks before
leaving validation to the server (``kubectl apply`` then sends ``fieldValidation=Strict``).

``/openapi/v2`` is served as JSON, or in gnostic's protobuf form (:mod:`openapi_pb`) to clients that ask for
it, as client-go's ``OpenAPISchema()`` does.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any, Iterable, Mapping

from ansible_operator_sandbox import builtin_schemas, openapi_pb
from ansible_operator_sandbox.errors import path_not_found
from ansible_operator_sandbox.resources import Registry, ResourceType

TITLE = "Kubernetes"
VERSION = "v1.32.0"
V2_PROTOBUF = openapi_pb.MEDIA_TYPE
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
_PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#resources"
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def crd_definition_name(group: str, version: str, kind: str) -> str:
    """kube-apiserver's name for a custom resource's schema: the group reversed
    (``com.example.v1.Widget``)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _crd_definitions(t: ResourceType, ref_prefix: str) -> dict[str, dict[str, Any]]:
    schema: dict[str, Any] = (copy.deepcopy(t.schema) if t.schema else
                              {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
    props["kind"] = {"description": _KIND_DOC, "type": "string"}
    meta_doc = ("Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
                "sig-architecture/api-conventions.md#metadata")
    props["metadata"] = (
        {"$ref": ref_prefix + _OBJECT_META, "description": meta_doc}
        if ref_prefix.startswith("#/def")
        else {"allOf": [{"$ref": ref_prefix + _OBJECT_META}], "description": meta_doc}
    )
    schema["properties"] = props
    schema.setdefault("type", "object")
    gvk = {"group": t.group, "version": t.version, "kind": t.kind}
    schema["x-kubernetes-group-version-kind"] = [gvk]
    list_schema = {
        "description": f"{t.kind}List is a list of {t.kind}", "type": "object", "required": ["items"],
        "properties": {"apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
                       "items": {"type": "array", "items": {"$ref": ref_prefix + crd_definition_name(
                           t.group, t.version, t.kind)}},
                       "kind": {"description": _KIND_DOC, "type": "string"},
                       "metadata": {"$ref": ref_prefix + "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}},
        "x-kubernetes-group-version-kind": [dict(gvk, kind=t.list_kind)]}
    return {crd_definition_name(t.group, t.version, t.kind): schema,
            crd_definition_name(t.group, t.version, t.list_kind): list_schema}


def _closure(names: Iterable[str], extra: Mapping[str, Any]) -> dict[str, Any]:
    """The named built-in definitions, those in ``extra``, and every built-in definition they reference."""
    defs = builtin_schemas.definitions()
    out: dict[str, Any] = {}
    todo = list(names) + list(extra)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        node = extra.get(name) if name in extra else defs.get(name)
        if node is None:
            continue
        out[name] = node
        todo.extend(_refs(node))
    return out


def _refs(node: Any) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                out.add(ref.rsplit("/", 1)[-1])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _builtin_names(t: ResourceType) -> list[str]:
    names = [builtin_schemas.definition_name(t.group, t.version, k) for k in (t.kind, t.list_kind)]
    return [n for n in names if n]


def _operations(t: ResourceType, ref_prefix: str, v3: bool) -> dict[str, Any]:
    """Path item(s) of one resource: collection and object operations, with the GVK kubectl looks for."""
    gvk = {"group": t.group, "version": t.version, "kind": t.kind}
    kind_ref = ref_prefix + (builtin_schemas.definition_name(t.group, t.version, t.kind)
                             or crd_definition_name(t.group, t.version, t.kind))

    def op(action: str, verb: str, with_body: bool, query: tuple[str, ...] = ()) -> dict[str, Any]:
        params: list[dict[str, Any]] = []
        for n in query:
            params.append(
                {
                    "name": n,
                    "in": "query",
                    "uniqueItems": True,
                    **({"schema": {"type": "string", "uniqueItems": True}} if v3 else {"type": "string"}),
                }
            )
        o: dict[str, Any] = {"operationId": f"{verb}{t.kind}", "parameters": params,
                             "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
        body_ref = ref_prefix + _PATCH if action == "patch" else kind_ref
        if v3:
            o["responses"] = {"200": {"description": "OK", "content": {
                "application/json": {"schema": {"$ref": kind_ref}}}}}
            if with_body:
                # a CRD's PATCH consumes no strategic merge patch (apiextensions' openapi builder), which
                # tells kubectl apply to send a JSON merge patch; built-ins accept all four
                types = (["application/apply-patch+yaml", "application/json-patch+json",
                          "application/merge-patch+json"]
                         + (["application/strategic-merge-patch+json"] if t.builtin else [])
                         if action == "patch" else ["*/*"])
                o["requestBody"] = {"content": {m: {"schema": {"$ref": body_ref}} for m in types}}
        else:
            o["responses"] = {"200": {"description": "OK", "schema": {"$ref": kind_ref}}}
            if with_body:
                params.insert(
                    0, {"name": "body", "in": "body", "required": True, "schema": {"$ref": body_ref}}
                )
        return o

    prefix = "/" + _gv_path(t.group, t.version)
    base = f"{prefix}/namespaces/{{namespace}}/{t.plural}" if t.namespaced else f"{prefix}/{t.plural}"
    writes = ("dryRun", "fieldManager", "fieldValidation", "pretty")
    ops: dict[str, Any] = {}
    verbs = set(t.verbs)
    collection: dict[str, Any] = {}
    if "list" in verbs:
        collection["get"] = op("list", "list", False, ("labelSelector", "fieldSelector", "limit", "continue"))
    if "create" in verbs:
        collection["post"] = op("post", "create", True, writes)
    if "deletecollection" in verbs:
        collection["delete"] = op("deletecollection", "deletecollection", False)
    if collection:
        ops[base] = collection
    item: dict[str, Any] = {}
    if "get" in verbs:
        item["get"] = op("get", "read", False)
    if "update" in verbs:
        item["put"] = op("put", "replace", True, writes)
    if "patch" in verbs:
        item["patch"] = op("patch", "patch", True, _QUERY_PARAMS)
    if "delete" in verbs:
        item["delete"] = op("delete", "delete", False)
    if item:
        ops[f"{base}/{{name}}"] = item
    return ops


def _v3_refs(node: Any) -> Any:
    """v2 ``#/definitions/`` references → v3 ``#/components/schemas/`` (a copy)."""
    return json.loads(json.dumps(node).replace('"#/definitions/', '"#/components/schemas/'))


@functools.cache
def _builtin_v3_schemas(names: tuple[str, ...]) -> dict[str, Any]:
    return _v3_refs(_closure(names, {}))  # type: ignore[no-any-return]


def gv_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths: dict[str, Any] = {}
    builtin: list[str] = []
    crds: dict[str, Any] = {}
    for t in types:
        paths.update(_operations(t, "#/components/schemas/", v3=True))
        if t.builtin:
            builtin.extend(_builtin_names(t))
        else:
            crds.update(_crd_definitions(t, "#/components/schemas/"))
    schemas = dict(_builtin_v3_schemas(tuple(sorted(set(builtin) | {_STATUS, _PATCH}))))
    if crds:
        schemas.update(_v3_refs(_closure([], crds)))
    return {"openapi": "3.0.0", "info": {"title": TITLE, "version": VERSION}, "paths": paths,
            "components": {"schemas": dict(sorted(schemas.items()))}}


def v2_document(registry: Registry) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    names: list[str] = [_STATUS, _PATCH]
    crds: dict[str, Any] = {}
    for group, versions in sorted(registry.groups().items()):
        for v in versions:
            for t in registry.in_group_version(group, v):
                paths.update(_operations(t, "#/definitions/", v3=False))
                if t.builtin:
                    names.extend(_builtin_names(t))
                else:
                    crds.update(_crd_definitions(t, "#/definitions/"))
    definitions = _closure(names, crds)
    return {
        "swagger": "2.0",
        "info": {"title": TITLE, "version": VERSION},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
    }


def _digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()


_BUILTIN_DIGESTS: dict[tuple[Any, ...], str] = {}


def _gv_digest(registry: Registry, group: str, version: str) -> str | None:
    """The document's hash; documents of built-in-only group/versions never change, so theirs is kept."""
    types = registry.in_group_version(group, version)
    key = None
    if types and all(t.builtin for t in types):
        key = (group, version, *((t.kind, t.plural, t.namespaced, tuple(t.verbs)) for t in types))
        if key in _BUILTIN_DIGESTS:
            return _BUILTIN_DIGESTS[key]
    doc = gv_document(registry, group, version)
    if doc is None:
        return None
    digest = _digest(doc)
    if key is not None:
        _BUILTIN_DIGESTS[key] = digest
    return digest


def root(registry: Registry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group, versions in sorted(registry.groups().items()):
        for v in versions:
            digest = _gv_digest(registry, group, v)
            if digest is None:
                continue
            path = _gv_path(group, v)
            out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": out}


_V2_CACHE: dict[str, bytes] = {}


def _v2_protobuf(doc: dict[str, Any]) -> bytes:
    """The protobuf form of the v2 document, kept for the last document seen (building it takes ~0.3 s)."""
    digest = _digest(doc)
    if digest not in _V2_CACHE:
        _V2_CACHE.clear()
        _V2_CACHE[digest] = openapi_pb.document(doc)
    return _V2_CACHE[digest]


def document(registry: Registry, parts: list[str], query: Mapping[str, str], accept: str = ""
             ) -> dict[str, Any] | bytes:
    """``parts`` is the path after ``/openapi``: ``["v2"]``, ``["v3"]``, ``["v3", "apis", "apps", "v1"]``, ...

    ``bytes`` (media type :data:`V2_PROTOBUF`) for a v2 request that prefers protobuf; a dict (JSON)
    otherwise.
    """
    if parts == ["v2"]:
        v2 = v2_document(registry)
        wanted = [a.split(";")[0].strip() for a in accept.split(",") if a.strip()]
        if wanted and wanted[0] in openapi_pb.ACCEPTED:
            return _v2_protobuf(v2)
        return v2
    if not parts or parts[0] != "v3":
        raise path_not_found()
    rest = parts[1:]
    if not rest:
        return root(registry)
    doc = None
    if rest[0] == "api" and len(rest) == 2:
        doc = gv_document(registry, "", rest[1])
    elif rest[0] == "apis" and len(rest) == 3:
        doc = gv_document(registry, rest[1], rest[2])
    if doc is None:
        raise path_not_found()
    return doc
