"""The OpenAPI v2 document in gnostic's protobuf form, as kube-apiserver serves it to client-go.

client-go's ``DiscoveryClient.OpenAPISchema()`` (``kubectl explain --output plaintext-openapiv2``, older
kubectl validation, tools built on kube-openapi's ``proto`` package) asks ``/openapi/v2`` only for
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` (answered as ``...spec.v2.v1.0+protobuf``,
a valid media type) and unmarshals the answer as gnostic's
``openapi.v2.Document`` (``openapiv2/OpenAPIv2.proto``, compiled into ``k8s.binpb``). This module converts the
JSON document of :mod:`openapi` into that message the way gnostic's compiler reads a JSON/YAML document:
named maps become lists of ``Named*`` entries in document order, ``x-*`` keys become vendor extensions and
free-form values (defaults, examples, enums, extensions) ``Any`` messages holding their YAML.
"""

from __future__ import annotations

from typing import Any

import yaml

from ansible_operator_sandbox import protobuf

#: the response's media type, and the two forms a client may ask for (kube-openapi's handler accepts both)
MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
ACCEPTED = (MEDIA_TYPE, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")


def _new(name: str) -> Any:
    return protobuf.message_class(f"openapi.v2.{name}")()


def _any(target: Any, value: Any) -> None:
    target.yaml = yaml.safe_dump(value, default_flow_style=False, sort_keys=False)


def _extensions(target: Any, node: dict[str, Any]) -> None:
    for k, v in node.items():
        if k.startswith("x-"):
            ext = target.vendor_extension.add()
            ext.name = k
            _any(ext.value, v)


_SCHEMA_SCALARS = {
    "format": "format",
    "title": "title",
    "description": "description",
    "pattern": "pattern",
    "discriminator": "discriminator",
    "multipleOf": "multiple_of",
    "maximum": "maximum",
    "minimum": "minimum",
    "exclusiveMaximum": "exclusive_maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "maxLength": "max_length",
    "minLength": "min_length",
    "maxItems": "max_items",
    "minItems": "min_items",
    "uniqueItems": "unique_items",
    "maxProperties": "max_properties",
    "minProperties": "min_properties",
    "readOnly": "read_only",
}


def schema(target: Any, node: dict[str, Any]) -> Any:
    """Fill an ``openapi.v2.Schema`` from a JSON schema object."""
    if "$ref" in node:
        target._ref = node["$ref"]
    for key, field in _SCHEMA_SCALARS.items():
        if key in node:
            setattr(target, field, node[key])
    target.required.extend(node.get("required") or [])
    for v in node.get("enum") or []:
        _any(target.enum.add(), v)
    for key in ("default", "example"):
        if key in node:
            _any(getattr(target, key), node[key])
    extra = node.get("additionalProperties")
    if isinstance(extra, bool):
        target.additional_properties.boolean = extra
    elif isinstance(extra, dict):
        schema(target.additional_properties.schema, extra)
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        target.type.value.extend(str(t) for t in types)
    items = node.get("items")
    if isinstance(items, dict):
        schema(target.items.schema.add(), items)
    elif isinstance(items, list):
        for item in items:
            schema(target.items.schema.add(), item)
    for sub in node.get("allOf") or []:
        schema(target.all_of.add(), sub)
    if isinstance(node.get("properties"), dict):
        target.properties.SetInParent()
        for name, sub in node["properties"].items():
            named = target.properties.additional_properties.add()
            named.name = name
            schema(named.value, sub)
    _extensions(target, node)
    return target


def _parameter(target: Any, p: dict[str, Any]) -> None:
    if p.get("in") == "body":
        body = target.parameter.body_parameter
        body.name, body.required = p.get("name", ""), bool(p.get("required"))
        setattr(body, "in", "body")
        schema(body.schema, p.get("schema") or {})
        return
    kind = {"query": "query_parameter_sub_schema", "path": "path_parameter_sub_schema",
            "header": "header_parameter_sub_schema"}.get(p.get("in", ""), "query_parameter_sub_schema")
    sub = getattr(target.parameter.non_body_parameter, kind)
    sub.name, sub.type = p.get("name", ""), p.get("type", "string")
    setattr(sub, "in", p.get("in", "query"))
    sub.required = bool(p.get("required"))
    sub.unique_items = bool(p.get("uniqueItems"))


def _operation(target: Any, op: dict[str, Any]) -> None:
    target.operation_id = op.get("operationId", "")
    for p in op.get("parameters") or []:
        _parameter(target.parameters.add(), p)
    for code, resp in (op.get("responses") or {}).items():
        named = target.responses.response_code.add()
        named.name = code
        named.value.response.description = resp.get("description", "")
        if "schema" in resp:
            schema(named.value.response.schema.schema, resp["schema"])
    _extensions(target, op)


def document(doc: dict[str, Any]) -> bytes:
    """The serialized ``openapi.v2.Document`` of a swagger 2.0 JSON document."""
    out = _new("Document")
    out.swagger = doc.get("swagger", "2.0")
    out.info.title = (doc.get("info") or {}).get("title", "")
    out.info.version = (doc.get("info") or {}).get("version", "")
    out.paths.SetInParent()
    for path, item in (doc.get("paths") or {}).items():
        named = out.paths.path.add()
        named.name = path
        for verb in ("get", "put", "post", "delete", "patch"):
            if verb in item:
                _operation(getattr(named.value, verb), item[verb])
    out.definitions.SetInParent()
    for name, node in (doc.get("definitions") or {}).items():
        named = out.definitions.additional_properties.add()
        named.name = name
        schema(named.value, node)
    return out.SerializeToString()  # type: ignore[no-any-return]
