"""Decoding of the Kubernetes protobuf request bodies kubectl's imperative ``create`` commands send.

``kubectl create namespace|configmap|secret|serviceaccount`` use typed clients whose request bodies are
``application/vnd.kubernetes.protobuf`` (and client-go does not fall back to JSON on 415). Rather than
rejecting the most common setup commands in scripts, the sandbox decodes those few kinds: the wire format
is the ``k8s\\0`` magic, a ``runtime.Unknown`` envelope (TypeMeta + raw bytes) and the kind's generated
message, whose field numbers are listed below (from k8s.io/api ``generated.proto``). Every other kind still
gets 415 UnsupportedMediaType; ``kubectl apply -f`` / ``create -f`` always send JSON.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

# A schema maps field number -> (json name, type); type is "string", "bytes", "varint", "bool",
# ("message", schema), ("repeated", type), ("map", value type).
Schema = dict[int, tuple[str, Any]]

_OWNER_REFERENCE: Schema = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
                            5: ("apiVersion", "string"), 6: ("controller", "bool"),
                            7: ("blockOwnerDeletion", "bool")}
_OBJECT_META: Schema = {
    1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
    5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "varint"),
    11: ("labels", ("map", "string")), 12: ("annotations", ("map", "string")),
    13: ("ownerReferences", ("repeated", ("message", _OWNER_REFERENCE))),
    14: ("finalizers", ("repeated", "string")),
}
_LOCAL_OBJECT_REFERENCE: Schema = {1: ("name", "string")}
_OBJECT_REFERENCE: Schema = {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                             4: ("uid", "string"), 5: ("apiVersion", "string")}

KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {1: ("metadata", ("message", _OBJECT_META)),
                          2: ("spec", ("message", {1: ("finalizers", ("repeated", "string"))}))},
    ("v1", "ConfigMap"): {1: ("metadata", ("message", _OBJECT_META)), 2: ("data", ("map", "string")),
                          3: ("binaryData", ("map", "bytes")), 4: ("immutable", "bool")},
    ("v1", "Secret"): {1: ("metadata", ("message", _OBJECT_META)), 2: ("data", ("map", "bytes")),
                       3: ("type", "string"), 4: ("stringData", ("map", "string")), 5: ("immutable", "bool")},
    ("v1", "ServiceAccount"): {1: ("metadata", ("message", _OBJECT_META)),
                               2: ("secrets", ("repeated", ("message", _OBJECT_REFERENCE))),
                               3: ("imagePullSecrets", ("repeated", ("message", _LOCAL_OBJECT_REFERENCE))),
                               4: ("automountServiceAccountToken", "bool")},
}


class ProtobufError(ValueError):
    """Not decodable here: malformed, or a kind this module has no field table for."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ProtobufError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, raw value) triples of one message."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError("truncated field")
            value = buf[pos:pos + length]
            pos += length
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((num, wire, value))
    return out


def _scalar(type_: Any, value: Any) -> Any:
    if type_ == "string":
        return bytes(value).decode("utf-8")
    if type_ == "bytes":
        return base64.b64encode(bytes(value)).decode()  # JSON form of []byte
    if type_ == "bool":
        return bool(value)
    if type_ == "varint":
        return int(value)
    if isinstance(type_, tuple) and type_[0] == "message":
        return decode_message(bytes(value), type_[1])
    raise ProtobufError(f"unknown field type {type_!r}")


def decode_message(buf: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for num, _, value in _fields(buf):
        spec = schema.get(num)
        if spec is None:
            continue  # fields the sandbox does not model (managedFields, timestamps, ...)
        name, type_ = spec
        if isinstance(type_, tuple) and type_[0] == "repeated":
            out.setdefault(name, []).append(_scalar(type_[1], value))
        elif isinstance(type_, tuple) and type_[0] == "map":
            entry = {n: v for n, _, v in _fields(bytes(value))}
            key = bytes(entry.get(1, b"")).decode("utf-8")
            out.setdefault(name, {})[key] = _scalar(type_[1], entry.get(2, b""))
        else:
            scalar = _scalar(type_, value)
            if scalar in ("", False, 0) and type_ in ("string", "bool", "varint"):
                continue  # proto2 always encodes optional scalars; JSON omits empty ones (omitempty)
            out[name] = scalar
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body → the equivalent JSON-shaped object (raises ProtobufError)."""
    try:
        return _decode(body)
    except UnicodeDecodeError as e:
        raise ProtobufError(f"invalid UTF-8 in a string field: {e}") from None


def _decode(body: bytes) -> dict[str, Any]:
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    envelope = {n: v for n, _, v in _fields(body[len(MAGIC):])}
    type_meta = {n: bytes(v).decode("utf-8") for n, _, v in _fields(bytes(envelope.get(1, b"")))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ProtobufError(f"protobuf bodies for {api_version}/{kind} are not supported by the sandbox")
    obj = decode_message(bytes(envelope.get(2, b"")), schema)
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj
