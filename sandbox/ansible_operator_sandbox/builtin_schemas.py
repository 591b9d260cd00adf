"""Schemas of the built-in kinds, from Kubernetes' published OpenAPI spec, and unknown-field pruning with
them.

``k8s_openapi.json.gz`` holds the ``definitions`` of the upstream ``swagger.json`` (release 1.32) for every
group/version the sandbox serves (``scripts/gen_k8s_openapi.py``). They serve two purposes:

- the published OpenAPI v2/v3 documents (:mod:`openapi`), so ``kubectl explain`` and client-side tools see
  the real schemas;
- server-side pruning: a real API server decodes a built-in kind into its Go type, so fields the type does
  not have are dropped, and reported per ``fieldValidation`` (``Strict``: 400 ``strict decoding error:
  unknown field "spec.x"``; ``Warn``, the default: a ``Warning`` header per field; ``Ignore``: silently).
  :func:`prune` walks an object against its kind's definition the same way, and reports the first value
  whose JSON type the Go type cannot hold (400 ``json: cannot unmarshal string into Go struct field
  DeploymentSpec.spec.replicas of type int32``, as encoding/json words it).
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from typing import Any

from ansible_operator_sandbox import schema

REF = "#/definitions/"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


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


class Walk:
    """One pruning pass: unknown field paths, and the first type error as encoding/json reports it."""

    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.type_error: str | None = None


def prune(group: str, version: str, kind: str, obj: dict[str, Any]) -> tuple[dict[str, Any], Walk]:
    """(``obj`` without the fields the kind's type does not have, what the walk found).

    ``walk.unknown`` are the dropped fields' paths as the strict decoder names them; ``walk.type_error`` the
    decoder's message for the first mistyped value (or None). Kinds without a definition are returned
    unchanged. ``obj`` is not modified.
    """
    walk = Walk()
    name = definition_name(group, version, kind)
    if name is None:
        return obj, walk
    return _prune(definitions()[name], obj, "", walk, name, [kind]), walk


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    return ref[len(REF):] if isinstance(ref, str) and ref.startswith(REF) else None


def _go_name(definition: str) -> str:
    """``io.k8s.api.core.v1.Container`` → ``v1.Container`` (package name and type, as Go prints a type)."""
    parts = definition.split(".")
    return ".".join(parts[-2:])


def _go_type(node: dict[str, Any]) -> str:
    ref = _ref_name(node)
    if ref is not None:
        return _go_name(ref)
    type_ = node.get("type")
    if type_ == "array":
        return "[]" + _go_type(node.get("items") or {})
    if type_ == "object" and isinstance(node.get("additionalProperties"), dict):
        return "map[string]" + _go_type(node["additionalProperties"])
    if type_ == "integer":
        return str(node.get("format") or "int64")
    if type_ == "number":
        return "float64"
    if type_ == "boolean":
        return "bool"
    return str(type_ or "interface {}")


def go_json_kind(value: Any, go_type: str = "") -> str:
    """encoding/json's UnmarshalTypeError.Value for a decoded JSON value: ``string``, ``bool``, ``object``,
    ``array``, ``null``, and for a number ``number``, or ``number <literal>`` when it was meant for an integer
    ``go_type`` (``number 1.5``, ``number 3000000000`` for an int32). The one naming used in every
    ``json: cannot unmarshal ...`` message of the sandbox."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return f"number {json.dumps(value)}" if go_type in ("int32", "int64") else "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), "value")


def _type_ok(node: dict[str, Any], ref: str | None, value: Any) -> bool:
    """Whether the Go type of ``node`` can hold ``value`` (:func:`schema.is_json_type`, typed decoding)."""
    if ref == _QUANTITY:  # Quantity.UnmarshalJSON: a string or any number
        return isinstance(value, str) or schema.is_json_type(value, "number")
    if ref == _INT_OR_STRING:  # IntOrString.UnmarshalJSON: a string, else an int32
        return isinstance(value, str) or schema.is_json_type(value, "integer", "int32", typed=True)
    type_ = node.get("type")
    if "properties" in node:
        type_ = "object"
    return schema.is_json_type(value, type_, node.get("format"), typed=True)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(node: dict[str, Any], value: Any, path: str, walk: Walk, struct: str, go_path: list[str]) -> Any:
    """``struct`` is the Go struct holding this field, ``go_path`` the field path encoding/json reports."""
    ref = _ref_name(node)
    target = resolve(node)
    if value is None:
        return value  # null leaves a Go field at its zero value
    if not _type_ok(target, ref, value):
        if walk.type_error is None and go_path:
            # IntOrString's own UnmarshalJSON decodes a non-string into its int32, and its error is that
            # decode's, with this field's context added
            go_type = "int32" if ref == _INT_OR_STRING else _go_type(node)
            walk.type_error = (f"json: cannot unmarshal {go_json_kind(value, go_type)} into Go struct field "
                               f"{struct.rsplit('.', 1)[-1]}.{'.'.join(go_path[1:]) or go_path[0]} "
                               f"of type {go_type}")
        return value
    node = target
    if isinstance(value, dict):
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return value
        props = node.get("properties")
        if isinstance(props, dict):
            owner = ref or struct
            out = {}
            for k, v in value.items():
                if k in props:
                    out[k] = _prune(props[k], v, _child(path, k), walk, owner, [*go_path, k])
                else:
                    walk.unknown.append(_child(path, k))
            return out
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return {k: _prune(extra, v, _child(path, k), walk, struct, go_path) for k, v in value.items()}
        return value  # free-form (RawExtension, JSON, ...): kept as sent
    if isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            return [_prune(items, v, f"{path}[{i}]", walk, struct, go_path) for i, v in enumerate(value)]
    return value
