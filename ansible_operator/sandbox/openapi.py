"""Minimal OpenAPI v3 documents: just what kubectl reads before it writes.

``kubectl apply/create/replace`` validate by default; kubectl (1.27+) first asks ``/openapi/v3`` whether the
PATCH operation of the object's group/version/kind accepts the ``fieldValidation`` query parameter and, if
so, leaves validation to the server (which the sandbox does: schema validation for custom resources,
``fieldValidation=Strict`` unknown-field errors). So each group/version document lists, per resource, the
PATCH operation with ``x-kubernetes-group-version-kind`` and a ``fieldValidation`` parameter.

Not served: component schemas (so ``kubectl explain`` has nothing to show) and ``/openapi/v2`` (404); kubectl
then computes strategic merge patches from its compiled-in types, as it does against any server.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

from ansible_operator.sandbox.errors import path_not_found
from ansible_operator.sandbox.resources import Registry, ResourceType

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _patch_op(t: ResourceType) -> dict[str, Any]:
    return {
        "operationId": f"patch{t.kind}",
        "parameters": [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                       for n in _QUERY_PARAMS],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
    }


def gv_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    prefix = "/" + _gv_path(group, version)
    paths: dict[str, Any] = {}
    for t in types:
        item = (f"{prefix}/namespaces/{{namespace}}/{t.plural}/{{name}}" if t.namespaced
                else f"{prefix}/{t.plural}/{{name}}")
        paths[item] = {"patch": _patch_op(t)}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (ansible-operator sandbox)", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": {}}}


def root(registry: Registry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group, versions in sorted(registry.groups().items()):
        for v in versions:
            doc = gv_document(registry, group, v)
            digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
            path = _gv_path(group, v)
            out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": out}


def document(registry: Registry, parts: list[str], query: Mapping[str, str]) -> dict[str, Any]:
    """``parts`` is the path after ``/openapi``: ``["v3"]``, ``["v3", "apis", "apps", "v1"]``, ..."""
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
