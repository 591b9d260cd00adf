"""JSON-type checks of CustomResourceDefinitions, before the structural-schema rules of :mod:`schema`.

The real apiserver decodes a CRD into typed Go structs, so ``versions: [null]``, ``shortNames: 5`` or
``properties: [1]`` never get as far as validation. The sandbox keeps JSON, so these checks stand in for that
decoding step: they reject (422) the shapes that the registry, the printer columns and the schema pipeline
would otherwise trip over.
"""

from __future__ import annotations

from typing import Any

from ansible_operator_sandbox import schema

__all__ = ["shape_errors"]


def shape_errors(crd: dict[str, Any]) -> list[schema.FieldError]:
    """JSON types of the CRD fields the sandbox itself reads (names, versions, subresources, columns)."""
    errors: list[schema.FieldError] = []

    def want(path: str, value: Any, type_: type, required: bool = False) -> bool:
        if value is None:
            if required:
                errors.append(schema.required(path, ""))
            return False
        if not isinstance(value, type_) or (type_ is not bool and isinstance(value, bool)):
            errors.append(schema.invalid(path, value, f"must be of type {type_.__name__}"))
            return False
        return True

    spec = crd.get("spec")
    if not want("spec", spec, dict, required=True) or not isinstance(spec, dict):
        return errors
    want("spec.group", spec.get("group"), str)
    want("spec.scope", spec.get("scope"), str)
    names = spec.get("names")
    if want("spec.names", names, dict, required=True) and isinstance(names, dict):
        for k in ("kind", "plural", "singular", "listKind"):
            want(f"spec.names.{k}", names.get(k), str)
        for k in ("shortNames", "categories"):
            if want(f"spec.names.{k}", names.get(k), list):
                for i, v in enumerate(names[k]):
                    want(f"spec.names.{k}[{i}]", v, str, required=True)
    versions = spec.get("versions")
    if want("spec.versions", versions, list, required=True) and isinstance(versions, list):
        for i, v in enumerate(versions):
            p = f"spec.versions[{i}]"
            if not want(p, v, dict, required=True):
                continue
            want(f"{p}.name", v.get("name"), str)
            want(f"{p}.served", v.get("served"), bool)
            want(f"{p}.storage", v.get("storage"), bool)
            if want(f"{p}.schema", v.get("schema"), dict):
                root = v["schema"].get("openAPIV3Schema")
                if want(f"{p}.schema.openAPIV3Schema", root, dict):
                    _schema_props_errors(root, f"{p}.schema.openAPIV3Schema", errors)
            subs = v.get("subresources")
            if want(f"{p}.subresources", subs, dict):
                want(f"{p}.subresources.status", subs.get("status"), dict)
                if want(f"{p}.subresources.scale", subs.get("scale"), dict):
                    for k in ("specReplicasPath", "statusReplicasPath", "labelSelectorPath"):
                        want(f"{p}.subresources.scale.{k}", subs["scale"].get(k), str)
            cols = v.get("additionalPrinterColumns")
            if want(f"{p}.additionalPrinterColumns", cols, list):
                for j, c in enumerate(cols):
                    cp = f"{p}.additionalPrinterColumns[{j}]"
                    if want(cp, c, dict, required=True):
                        want(f"{cp}.name", c.get("name"), str, required=True)
                        want(f"{cp}.jsonPath", c.get("jsonPath"), str, required=True)
                        want(f"{cp}.type", c.get("type"), str)
                        want(f"{cp}.priority", c.get("priority"), int)
    return errors


_SCHEMA_BOOLS = (
    "nullable",
    "uniqueItems",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "exclusiveMinimum",
    "exclusiveMaximum",
)
_SCHEMA_STRS = ("type", "format", "pattern", "description", "title", "x-kubernetes-list-type",
                "x-kubernetes-map-type")


def _schema_props_errors(node: Any, path: str, errors: list[schema.FieldError], depth: int = 0) -> None:
    """JSON types of a JSONSchemaProps tree, as the typed decoder enforces them."""
    if depth > 64:
        errors.append(schema.invalid(path, "<schema>", "schema nesting is too deep"))
        return
    if not isinstance(node, dict):
        errors.append(schema.invalid(path, node, "must be an object (JSONSchemaProps)"))
        return
    for k in _SCHEMA_BOOLS:
        if k in node and not isinstance(node[k], bool):
            errors.append(schema.invalid(f"{path}.{k}", node[k], "must be a boolean"))
    for k in _SCHEMA_STRS:
        if k in node and not isinstance(node[k], str):
            errors.append(schema.invalid(f"{path}.{k}", node[k], "must be a string"))
    for k in ("required", "x-kubernetes-list-map-keys"):
        if k in node and not (isinstance(node[k], list) and all(isinstance(x, str) for x in node[k])):
            errors.append(schema.invalid(f"{path}.{k}", node[k], "must be a list of strings"))
    if "enum" in node and not isinstance(node["enum"], list):
        errors.append(schema.invalid(f"{path}.enum", node["enum"], "must be a list"))
    if "properties" in node:
        if not isinstance(node["properties"], dict):
            errors.append(schema.invalid(f"{path}.properties", node["properties"], "must be an object"))
        else:
            for name, child in node["properties"].items():
                _schema_props_errors(child, f"{path}.properties[{name}]", errors, depth + 1)
    if "items" in node:
        _schema_props_errors(node["items"], f"{path}.items", errors, depth + 1)
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], bool):
        _schema_props_errors(node["additionalProperties"], f"{path}.additionalProperties", errors, depth + 1)
    if "not" in node:
        _schema_props_errors(node["not"], f"{path}.not", errors, depth + 1)
    for k in ("allOf", "anyOf", "oneOf"):
        if k in node:
            if not isinstance(node[k], list):
                errors.append(schema.invalid(f"{path}.{k}", node[k], "must be a list"))
            else:
                for i, child in enumerate(node[k]):
                    _schema_props_errors(child, f"{path}.{k}[{i}]", errors, depth + 1)
