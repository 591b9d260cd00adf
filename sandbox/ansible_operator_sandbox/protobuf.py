"""Kubernetes protobuf bodies (``application/vnd.kubernetes.protobuf``), read from the upstream descriptors.

kubectl's imperative commands (``kubectl create deployment|job|role|...``) and any client-go typed client send
protobuf bodies and client-go does not fall back to JSON on 415. The wire format is the ``k8s\\0`` magic and a
``runtime.Unknown`` envelope (TypeMeta + the raw bytes of the kind's generated message).

The messages come from ``k8s.binpb``, a FileDescriptorSet compiled by ``scripts/gen_k8s_proto.py`` from the
``generated.proto`` files of k8s.io/api, apimachinery, apiextensions-apiserver and kube-aggregator (release
v0.32.9), each field's ``json_name`` set to the Go ``json`` tag. ``k8s_fields.json`` adds what only the Go
types know: fields embedded inline in JSON, and scalar fields whose zero value is kept (pointers such as
``spec.replicas: 0``; gogo-protobuf encodes every non-pointer scalar, so zero values are otherwise dropped
as Go's ``omitempty`` would). Conversion walks the descriptors (``google.protobuf``'s pool and dynamic
messages); the apimachinery types with custom JSON forms are mapped as their Go ``MarshalJSON`` does:
Time/MicroTime (RFC 3339), Duration, IntOrString, Quantity, RawExtension/FieldsV1/JSON (embedded JSON) and
apiextensions' JSONSchemaPropsOr{Bool,Array,StringArray}.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import re
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, EncodeError, Message

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_RUNTIME = "k8s.io.apimachinery.pkg.runtime"
_APIEXT = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1"
_ZERO_TIME_SECONDS = -62135596800  # Go's time.Time{}.Unix()
# proto package of each API group (the group's first DNS label names the k8s.io/api directory)
_PACKAGES = {"": "k8s.io.api.core.v1", "meta.k8s.io": _META, "apiextensions.k8s.io": _APIEXT,
             "apiregistration.k8s.io": "k8s.io.kube_aggregator.pkg.apis.apiregistration.v1"}


class ProtobufError(ValueError):
    """A body that is not a decodable Kubernetes protobuf message, or an object with no protobuf form here."""


class UnsupportedKind(ProtobufError):
    """A well-formed envelope for a kind without a protobuf message (custom resources): 415, not 400."""


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    data = resources.files(__package__).joinpath("k8s.binpb").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(f)
    return pool


@functools.cache
def _fields_info() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    raw = json.loads(resources.files(__package__).joinpath("k8s_fields.json").read_text())
    return (
        {k: frozenset(v) for k, v in raw["inline"].items()},
        {k: frozenset(v) for k, v in raw["keep"].items()},
    )


@functools.cache
def message_type(api_version: str, kind: str) -> Descriptor | None:
    """The descriptor of ``kind`` in ``api_version`` (meta/v1 kinds such as Status/DeleteOptions in any
    group)."""
    group, _, version = api_version.rpartition("/")
    package = _PACKAGES.get(group) or f"k8s.io.api.{group.split('.')[0]}.{version}"
    pool = _pool()
    for candidate in (f"{package}.{kind}", f"{_META}.{kind}"):
        try:
            return pool.FindMessageTypeByName(candidate)
        except KeyError:
            continue
    return None


def _cls(desc: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(desc)


def message_class(full_name: str) -> type[Message]:
    """The dynamic message class of any message in ``k8s.binpb`` (e.g. ``openapi.v2.Document``)."""
    return _cls(_pool().FindMessageTypeByName(full_name))


# ---- protobuf -> JSON ------------------------------------------------------------------------------
def _go_duration(ns: int) -> str:
    """Go's time.Duration.String()."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_trim(ns / size)}{unit}"
    h, rest = divmod(ns, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    secs = _trim(rest / 10**9) + "s"
    if h:
        return f"{sign}{h}h{m}m{secs}"
    if m:
        return f"{sign}{m}m{secs}"
    return sign + secs


def _trim(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".")


def _special_to_json(name: str, msg: Any) -> tuple[bool, Any]:
    """(handled, value) for the apimachinery types with custom JSON forms; value None means omitted."""
    if name in (f"{_META}.Time", f"{_META}.MicroTime"):
        if not msg.ListFields() or msg.seconds == _ZERO_TIME_SECONDS:
            return True, None
        t = dt.datetime.fromtimestamp(msg.seconds, dt.timezone.utc)
        if name.endswith(".Time"):  # the apiserver's JSON keeps seconds only
            return True, t.strftime("%Y-%m-%dT%H:%M:%SZ")
        return True, t.strftime("%Y-%m-%dT%H:%M:%S") + f".{msg.nanos // 1000:06d}Z"
    if name == f"{_META}.Duration":
        return True, _go_duration(msg.duration)
    if name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        return True, msg.strVal if msg.type == 1 else msg.intVal
    if name == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return True, msg.string
    if name in (f"{_RUNTIME}.RawExtension", f"{_META}.FieldsV1", f"{_APIEXT}.JSON"):
        raw = bytes(msg.Raw if name.endswith("FieldsV1") else msg.raw)
        if not raw:
            return True, None
        if raw.startswith(MAGIC):
            return True, decode(raw)
        try:
            return True, json.loads(raw)
        except ValueError as e:
            raise ProtobufError(f"{name.rsplit('.', 1)[1]} does not hold JSON: {e}") from None
    if name == f"{_APIEXT}.JSONSchemaPropsOrBool":
        return True, to_json(msg.schema) if msg.HasField("schema") else msg.allows
    if name == f"{_APIEXT}.JSONSchemaPropsOrArray":
        return True, to_json(msg.schema) if msg.HasField("schema") else [to_json(s) for s in msg.jSONSchemas]
    if name == f"{_APIEXT}.JSONSchemaPropsOrStringArray":
        return True, to_json(msg.schema) if msg.HasField("schema") else list(msg.property)
    return False, None


def _value_to_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _message_value(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(bytes(value)).decode()  # the JSON form of a Go []byte
    if isinstance(value, bytes):  # upb hands back proto2 strings that are not UTF-8 as bytes
        raise ProtobufError(f"{field.full_name}: invalid UTF-8 in a string field")
    return value


def _message_value(msg: Any) -> Any:
    handled, value = _special_to_json(msg.DESCRIPTOR.full_name, msg)
    return value if handled else to_json(msg)


def to_json(msg: Any) -> dict[str, Any]:
    """A decoded message → the object the apiserver's JSON serializer would write for it."""
    desc = msg.DESCRIPTOR
    inline, keep = _fields_info()
    inline_names = inline.get(desc.full_name, frozenset())
    keep_names = keep.get(desc.full_name, frozenset())
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            entries = {
                _value_to_json(field.message_type.fields_by_name["key"], k): _value_to_json(value_field, v)
                for k, v in value.items()
            }
            if entries:
                out[field.json_name] = entries
        elif field.is_repeated:
            if len(value):
                out[field.json_name] = [_value_to_json(field, v) for v in value]
        elif field.name in inline_names:
            out.update(_message_value(value))
        else:
            converted = _value_to_json(field, value)
            if converted is None:
                continue
            if field.type != FieldDescriptor.TYPE_MESSAGE and not converted and field.name not in keep_names:
                continue  # a zero value gogo encodes for a non-pointer field with omitempty
            out[field.json_name] = converted
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body → the equivalent JSON-shaped object (raises ProtobufError)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    try:
        envelope = _cls(_pool().FindMessageTypeByName(f"{_RUNTIME}.Unknown")).FromString(body[len(MAGIC):])
        api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind  # type: ignore[attr-defined]
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise ProtobufError("invalid UTF-8 in the envelope's TypeMeta")
        if envelope.contentEncoding:  # type: ignore[attr-defined]
            raise ProtobufError(f"unsupported content encoding {envelope.contentEncoding!r}")  # type: ignore
        desc = message_type(api_version, kind)
        if desc is None:
            raise UnsupportedKind(f"no protobuf message for {api_version}/{kind}")
        obj = to_json(_cls(desc).FromString(envelope.raw))  # type: ignore[attr-defined]
    except DecodeError as e:
        raise ProtobufError(f"malformed protobuf body: {e}") from None
    except UnicodeDecodeError as e:
        raise ProtobufError(f"invalid UTF-8 in a string field: {e}") from None
    except (OverflowError, OSError, RecursionError) as e:  # e.g. a Time beyond year 9999
        raise ProtobufError(f"a value out of range: {e}") from None
    return {"kind": kind, "apiVersion": api_version, **obj}


# ---- JSON -> protobuf ------------------------------------------------------------------------------
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}


def _parse_duration(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    parts = _DURATION_PART.findall(body)
    if body == "0":
        return 0
    if not parts or "".join(n + u for n, u in parts) != body:
        raise ProtobufError(f"invalid duration {text!r}")
    return sign * round(sum(float(n) * _DURATION_UNITS[u] for n, u in parts))


def _parse_time(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ProtobufError(f"invalid time {text!r}") from None


def _special_from_json(name: str, msg: Any, value: Any) -> bool:
    if name in (f"{_META}.Time", f"{_META}.MicroTime"):
        t = _parse_time(str(value))
        msg.seconds = int(t.timestamp() // 1)
        if name.endswith("MicroTime"):
            msg.nanos = t.microsecond * 1000
        return True
    if name == f"{_META}.Duration":
        msg.duration = _parse_duration(str(value))
        return True
    if name == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        if isinstance(value, int) and not isinstance(value, bool):
            msg.type, msg.intVal = 0, value
        else:
            msg.type, msg.strVal = 1, str(value)
        return True
    if name == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        msg.string = str(value)
        return True
    if name in (f"{_RUNTIME}.RawExtension", f"{_META}.FieldsV1", f"{_APIEXT}.JSON"):
        raw = json.dumps(value, separators=(",", ":")).encode()
        if name.endswith("FieldsV1"):
            msg.Raw = raw
        else:
            msg.raw = raw
        return True
    if name == f"{_APIEXT}.JSONSchemaPropsOrBool":
        if isinstance(value, bool):
            msg.allows = value
        else:
            msg.allows = True
            from_json(msg.schema, value)
        return True
    if name == f"{_APIEXT}.JSONSchemaPropsOrArray":
        if isinstance(value, list):
            for item in value:
                from_json(msg.jSONSchemas.add(), item)
        else:
            from_json(msg.schema, value)
        return True
    if name == f"{_APIEXT}.JSONSchemaPropsOrStringArray":
        if isinstance(value, list):
            msg.property.extend(str(v) for v in value)
        else:
            from_json(msg.schema, value)
        return True
    return False


def _scalar_from_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    if field.type == FieldDescriptor.TYPE_STRING:
        return str(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return bool(value)
    if field.cpp_type in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return float(value)
    return int(value)


def _fill(msg: Any, field: FieldDescriptor, value: Any) -> None:
    """Set ``value`` into the sub-message ``msg`` of type ``field.message_type``."""
    assert field.message_type is not None, f"{field.full_name} is not a message field"
    if not _special_from_json(field.message_type.full_name, msg, value):
        if not isinstance(value, dict):
            raise ProtobufError(f"{field.full_name}: expected an object, got {type(value).__name__}")
        from_json(msg, value)


def from_json(msg: Any, obj: dict[str, Any]) -> Any:
    """Fill ``msg`` from a JSON-shaped object (fields without a protobuf counterpart are left out)."""
    desc = msg.DESCRIPTOR
    inline = _fields_info()[0].get(desc.full_name, frozenset())
    for field in desc.fields:
        if field.name in inline:
            from_json(getattr(msg, field.name), obj)
            continue
        value = obj.get(field.json_name)
        if value is None:
            continue
        target = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            if not isinstance(value, dict):
                raise ProtobufError(f"{field.full_name}: expected an object, got {type(value).__name__}")
            value_field = field.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_field.message_type is not None:
                    _fill(target[k], value_field, v)
                else:
                    target[k] = _scalar_from_json(value_field, v)
        elif field.is_repeated:
            if not isinstance(value, list):
                raise ProtobufError(f"{field.full_name}: expected an array, got {type(value).__name__}")
            for v in value:
                if field.message_type is not None:
                    _fill(target.add(), field, v)
                else:
                    target.append(_scalar_from_json(field, v))
        elif field.message_type is not None:
            target.SetInParent()
            _fill(target, field, value)
        else:
            setattr(msg, field.name, _scalar_from_json(field, value))
    return msg


def encode(obj: dict[str, Any]) -> bytes:
    """A JSON-shaped object with apiVersion/kind → the protobuf wire form (raises ProtobufError)."""
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    desc = message_type(api_version, kind)
    if desc is None:
        raise UnsupportedKind(f"no protobuf message for {api_version}/{kind}")
    try:
        raw = from_json(_cls(desc)(), obj).SerializeToString()
    except (TypeError, ValueError, AttributeError, EncodeError) as e:
        raise ProtobufError(f"{kind} has no protobuf form: {e}") from None
    envelope = _cls(_pool().FindMessageTypeByName(f"{_RUNTIME}.Unknown"))()
    envelope.typeMeta.apiVersion = api_version  # type: ignore[attr-defined]
    envelope.typeMeta.kind = kind  # type: ignore[attr-defined]
    envelope.raw = raw  # type: ignore[attr-defined]
    return MAGIC + envelope.SerializeToString()


def accepts_only_protobuf(accept: str) -> bool:
    """Whether an Accept header lists protobuf and nothing this server could answer in JSON instead."""
    types = [part.split(";")[0].strip().lower() for part in accept.split(",") if part.strip()]
    return bool(types) and all(t == MEDIA_TYPE for t in types)


def negotiate(accept: str, resp: Any) -> Any:
    """Re-encode a JSON answer in protobuf when the client accepts only protobuf.

    Objects, lists and Status have protobuf messages; documents without one (discovery, OpenAPI, Tables) and
    watch streams stay JSON, which client-go decodes by the response's Content-Type.
    """
    from aiohttp import web

    if not accepts_only_protobuf(accept) or not isinstance(resp, web.Response) or \
            resp.content_type != "application/json" or not isinstance(resp.body, bytes):
        return resp
    try:
        obj = json.loads(resp.body)
        body = encode(obj) if isinstance(obj, dict) else None
    except (ValueError, ProtobufError):
        body = None
    if body is None:
        return resp
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.Response(body=body, status=resp.status, headers=headers, content_type=MEDIA_TYPE)


#: the media type of a protobuf watch stream (length-delimited frames)
WATCH_MEDIA_TYPE = MEDIA_TYPE + ";stream=watch"


def watch_frames(lines: bytes) -> bytes:
    """JSON watch lines (``{"type": ..., "object": ...}\\n``) → the protobuf stream kube-apiserver writes.

    Each event is a ``meta.v1.WatchEvent`` serialized raw (the stream serializer adds no envelope), prefixed
    with its length as 4 big-endian bytes (LengthDelimitedFramer); its ``object.raw`` is the object in the
    usual ``k8s\\0`` + ``runtime.Unknown`` form, as client-go's embedded decoder expects.
    """
    out = bytearray()
    for line in lines.splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        msg = message_class(f"{_META}.WatchEvent")()
        try:
            obj = encode(event["object"])
        except (
            ProtobufError
        ) as e:  # an object without a protobuf form: the stream reports it, as the server does
            event = {"type": "ERROR"}
            obj = encode(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "code": 500,
                    "reason": "InternalError",
                    "message": f"unable to encode watch object: {e}",
                }
            )
        msg.type = event["type"]  # type: ignore[attr-defined]
        msg.object.raw = obj  # type: ignore[attr-defined]
        raw = msg.SerializeToString()
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


def read_watch_frames(stream: bytes) -> list[dict[str, Any]]:
    """The inverse of :func:`watch_frames` (``{"type", "object"}`` per frame); raises ProtobufError."""
    events = []
    pos = 0
    while pos < len(stream):
        if pos + 4 > len(stream):
            raise ProtobufError("truncated frame length")
        size = int.from_bytes(stream[pos:pos + 4], "big")
        frame = stream[pos + 4:pos + 4 + size]
        if len(frame) != size:
            raise ProtobufError("truncated frame")
        pos += 4 + size
        try:
            msg = message_class(f"{_META}.WatchEvent").FromString(frame)
        except DecodeError as e:
            raise ProtobufError(f"malformed watch event: {e}") from None
        events.append({"type": msg.type, "object": decode(msg.object.raw)})  # type: ignore[attr-defined]
    return events
