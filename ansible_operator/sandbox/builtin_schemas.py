"""Schemas of the built-in kinds, from Kubernetes' published OpenAPI spec, and unknown-field pruning with them.

``k8s_openapi.json.gz`` holds the ``definitions`` of the upstream ``swagger.json`` (release 1.32) for every
group/version the sandbox serves (``scripts/gen_k8s_openapi.py``). They serve two purposes:

- the published OpenAPI v2/v3 documents (:mod:`openapi`), so ``kubectl explain`` and client-side tools see
  the real schemas;
- server-side pruning: a real API server decodes a built-in kind into its Go type, so fields the type does
  not have are dropped, and reported per ``fieldValidation`` (``Strict``: 400 ``strict decoding error:
  unknown field "spec.x"``; ``Warn``, the default: a ``Warning`` header per field; ``Ignore``: silently).
  :func:`prune` walks an object against its kind's definition the same way.
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from typing import Any

REF = "#/definitions/"


@functools.cache
def definitions() -> dict[str, Any]:
    raw = resources.files(__package__).joinpath("k8s_openapi.json.gz").read_bytes()
    return json.loads(gzip.decompress(raw))["definitions"]  # type: ignore[no-any-return]


@functools.cache
def _by_gvk() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for name, d in definitions().items():
        for gvk in d.get("x-kubernetes-group-version-kind") or []:
            out[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name
    return out


def definition_name(group: str, version: str, kind: str) -> str | None:
    """The definition of a built-in kind (e.g. ``io.k8s.api.apps.v1.Deployment``), or None."""
    return _by_gvk().get((group, version, kind))


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` itself, or the definition its ``$ref`` points at."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF):
        target = definitions().get(ref[len(REF):])
        if target is not None:
            return target  # type: ignore[no-any-return]
    return node


def prune(group: str, version: str, kind: str, obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(``obj`` without the fields the kind's type does not have, their paths as the strict decoder names them).

    Kinds without a definition are returned unchanged. ``obj`` is not modified.
    """
    name = definition_name(group, version, kind)
    if name is None:
        return obj, []
    unknown: list[str] = []
    pruned = _prune(definitions()[name], obj, "", unknown)
    return pruned, unknown


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(node: dict[str, Any], value: Any, path: str, unknown: list[str]) -> Any:
    node = resolve(node)
    if isinstance(value, dict):
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = node.get("properties")
        if isinstance(props, dict):
            out = {}
            for k, v in value.items():
                if k in props:
                    out[k] = _prune(props[k], v, _child(path, k), unknown)
                else:
                    unknown.append(_child(path, k))
            return out
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return {k: _prune(extra, v, _child(path, k), unknown) for k, v in value.items()}
        return value  # free-form (RawExtension, JSON, ...): kept as sent
    if isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            return [_prune(items, v, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    return value
