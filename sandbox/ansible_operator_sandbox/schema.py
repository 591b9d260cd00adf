"""CRD structural-schema semantics (``openAPIV3Schema``) the way kube-apiserver applies them.

Why this exists: roles under test create and update custom resources through the sandbox; a role
that sends a wrong type, forgets a required field or relies on a ``default`` must see the same
outcome it would see on a real cluster (422 Invalid with field paths, defaults filled in, unknown
fields silently dropped).

Order of operations on create/update (what kube-apiserver does, and what the sandbox server does):

1. :func:`prune` — drop fields the schema does not know (unless ``x-kubernetes-preserve-unknown-fields``);
   ``apiVersion``/``kind``/``metadata`` at the root and in ``x-kubernetes-embedded-resource`` objects
   are never pruned.
2. :func:`apply_defaults` — fill ``default`` for missing properties of present objects (recursively,
   including inside the defaults themselves); ``null`` in a non-nullable field is replaced by its
   default, or dropped when there is none.
3. :func:`validate` — returns :class:`FieldError` s; the server answers 422 with
   :func:`invalid_message` and ``[e.cause() for e in errors]`` as ``Status.details.causes``.

Messages mirror the apiserver's (kube-openapi validation converted to ``field.Error``), e.g.
``spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1``.

Not supported: ``x-kubernetes-validations`` (CEL rules are ignored), ``$ref``, ratcheting.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import ipaddress
import json
import math
import re
import uuid as _uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "FieldError",
    "validate",
    "apply_defaults",
    "prune",
    "validate_crd",
    "invalid_message",
    "format_value",
    # field.Error constructors, shared with the server for its own (built-in kind) validation
    "required",
    "invalid",
    "type_invalid",
    "not_supported",
    "too_long",
    "too_many",
    "forbidden",
    "duplicate",
]

_ROOT_META_KEYS = ("apiVersion", "kind", "metadata")

# field.ErrorType -> the human string Kubernetes prints in front of the detail.
_TYPE_STRINGS = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
}
# Error types whose body never shows the bad value (mirrors field.Error.ErrorBody).
_NO_VALUE_TYPES = {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "InternalError"}


@dataclass(frozen=True)
class FieldError:
    """One validation failure, shaped like ``k8s.io/apimachinery/pkg/util/validation/field.Error``.

    ``message`` is what the apiserver calls the error *body* (type string, value, detail — no field
    path); ``str(err)`` gives ``"<field>: <message>"`` as in the top-level Status message.
    """

    type: str
    field: str
    message: str

    def cause(self) -> dict[str, str]:
        """The ``Status.details.causes`` entry for this error."""
        return {"reason": self.type, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


# --------------------------------------------------------------------------------------------------
# message helpers


def format_value(value: Any) -> str:
    """Render a bad value the way ``field.Error.ErrorBody`` does (Go %v / %q / JSON)."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _go_float(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _num(value: Any) -> str:
    """Format a schema bound (minimum, multipleOf, ...) like Go prints a float64."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _make(
    type_: str, field: str, value: Any = None, detail: str = "", *, show_value: bool = True
) -> FieldError:
    body = _TYPE_STRINGS.get(type_, type_)
    if show_value and type_ not in _NO_VALUE_TYPES:
        body = f"{body}: {format_value(value)}"
    if detail:
        body = f"{body}: {detail}"
    return FieldError(type_, field, body)


def required(field: str, detail: str = "") -> FieldError:
    return _make("FieldValueRequired", field, detail=detail, show_value=False)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return _make("FieldValueInvalid", field, value, detail)


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return _make("FieldValueTypeInvalid", field, value, detail)


def not_supported(field: str, value: Any, supported: Iterable[Any]) -> FieldError:
    # strconv.Quote of each allowed value; non-strings are JSON-encoded first (as the apiserver does).
    quoted = ", ".join(
        json.dumps(v if isinstance(v, str) else json.dumps(v, separators=(",", ":")), ensure_ascii=False)
        for v in supported
    )
    return _make("FieldValueNotSupported", field, value, f"supported values: {quoted}" if quoted else "")


def too_long(field: str, max_length: int) -> FieldError:
    return _make("FieldValueTooLong", field, detail=f"may not be longer than {max_length}", show_value=False)


def too_many(field: str, actual: int, maximum: int) -> FieldError:
    return _make("FieldValueTooMany", field, actual, f"must have at most {maximum} items")


def forbidden(field: str, detail: str) -> FieldError:
    return _make("FieldValueForbidden", field, detail=detail, show_value=False)


def duplicate(field: str, value: Any) -> FieldError:
    return _make("FieldValueDuplicate", field, value)


def invalid_message(kind: str, name: str, errors: list[FieldError]) -> str:
    """Top-level message of a 422 Invalid Status.

    ``kind`` is the qualified kind, e.g. ``Memcached.cache.example.com`` (plain ``Pod`` for core).
    One error is printed bare, several are bracketed and comma-joined (``utilerrors.Aggregate``).
    """
    parts = [str(e) for e in errors]
    if len(parts) == 1:
        agg = parts[0]
    else:
        agg = "[" + ", ".join(parts) + "]"
    return f"{kind} {json.dumps(name, ensure_ascii=False)} is invalid: {agg}"


# --------------------------------------------------------------------------------------------------
# paths


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if _INT64_MIN <= value <= _INT64_MAX else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_json_type(value: Any, type_: str | None, fmt: str | None = None, *, typed: bool = False) -> bool:
    """Whether a decoded JSON ``value`` is of OpenAPI type ``type_``, as kube-apiserver decides it; the one
    type check for custom resources (here) and built-in kinds (:mod:`builtin_schemas`).

    The two decode differently, so they differ for numbers:

    * a custom resource (``typed=False``) is decoded into unstructured data (an integer literal that fits
      int64 into an int64, any other number into a float64) and checked by kube-openapi's type validator:
      ``integer`` is an int64, or a float64 whose value is an integer within +-(2**53 - 1)
      (``swag.IsFloat64AJSONInteger``: ``2.0`` is an integer, ``2**64`` is not); formats are not
      range-checked;
    * a built-in kind (``typed=True``) is decoded by encoding/json straight into its Go struct: an integer
      field takes only an integer literal that fits its Go type (``int32`` for ``format: int32``, else
      ``int64``), never ``2.0``.

    ``boolean`` is never a number; an unknown or missing ``type_`` accepts anything.
    """
    if type_ == "object":
        return isinstance(value, dict)
    if type_ == "array":
        return isinstance(value, list)
    if type_ == "string":
        return isinstance(value, str)
    if type_ == "boolean":
        return isinstance(value, bool)
    if type_ == "null":
        return value is None
    if type_ not in ("integer", "number"):
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if type_ == "number":
        return True
    if isinstance(value, float):
        return not typed and _float_is_json_integer(value)
    if typed and fmt == "int32":
        return _INT32_MIN <= value <= _INT32_MAX
    return _INT64_MIN <= value <= _INT64_MAX


def _float_is_json_integer(f: float) -> bool:
    """go-openapi ``swag.IsFloat64AJSONInteger``: an integral value within +-(2**53 - 1). (Its newer versions
    also take a float within a relative 1e-9 of an integer as one, a rounding allowance not emulated.)"""
    return math.isfinite(f) and -_MAX_JSON_FLOAT <= f <= _MAX_JSON_FLOAT and f == math.trunc(f)


# --------------------------------------------------------------------------------------------------
# formats

# The apiserver decodes JSON integers into int64; anything larger becomes a float64 ("number").
# Like the apiserver, numeric formats (int32, int64, float, double) are not range-checked.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_JSON_FLOAT = float(2**53 - 1)
_DATE_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DURATION_RE = re.compile(r"^([+-]?\d+(\.\d+)?(ns|us|µs|ms|s|m|h|d|w))+$")
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME_RE = re.compile(rf"^(?=.{{1,253}}$){_HOST_LABEL}(\.{_HOST_LABEL})*$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
_MAC_RE = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$")
_HEXCOLOR_RE = re.compile(r"^#?([0-9A-Fa-f]{3}|[0-9A-Fa-f]{6})$")


def _valid_date_time(s: str) -> bool:
    if not _DATE_TIME_RE.match(s):
        return False
    try:
        _dt.datetime.fromisoformat(s.replace("z", "Z").replace("Z", "+00:00").replace("t", "T"))
    except ValueError:
        return False
    return True


def _valid_date(s: str) -> bool:
    try:
        _dt.date.fromisoformat(s)
    except ValueError:
        return False
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s))


def _valid_byte(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _valid_uuid(s: str) -> bool:
    if not re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s):
        return False
    _uuid.UUID(s)
    return True


def _valid_ip(s: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(s).version == version
    except ValueError:
        return False


def _valid_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


_STRING_FORMATS = {
    "date-time": _valid_date_time,
    "datetime": _valid_date_time,
    "date": _valid_date,
    "byte": _valid_byte,
    "uuid": _valid_uuid,
    "ipv4": lambda s: _valid_ip(s, 4),
    "ipv6": lambda s: _valid_ip(s, 6),
    "cidr": _valid_cidr,
    "hostname": lambda s: bool(_HOSTNAME_RE.match(s)),
    "email": lambda s: bool(_EMAIL_RE.match(s)),
    "mac": lambda s: bool(_MAC_RE.match(s)),
    "duration": lambda s: bool(_DURATION_RE.match(s)),
    "hexcolor": lambda s: bool(_HEXCOLOR_RE.match(s)),
}


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str] | None:
    """A schema ``pattern`` via Python ``re``: search semantics (like JSON Schema) and ASCII-only
    ``\\d``/``\\w``/``\\s`` (the apiserver compiles patterns with Go's RE2, which is ASCII there too)."""
    try:
        return re.compile(pattern, re.ASCII)
    except re.error:
        return None


# --------------------------------------------------------------------------------------------------
# validation


def validate(schema: dict, obj: Any, path: str = "") -> list[FieldError]:
    """Validate ``obj`` (a whole object, from the root) against ``schema``; [] when valid.

    At the root, ``apiVersion``/``kind`` are not checked against the schema and ``metadata`` only
    for what the schema declares under ``properties.metadata`` (the apiserver validates ObjectMeta
    separately).
    """
    errors: list[FieldError] = []
    if not schema:
        return errors
    if path == "" and isinstance(obj, dict) and schema.get("type", "object") == "object":
        _validate_root(schema, obj, errors)
    else:
        _validate(schema, obj, path, errors)
    return errors


def _validate_root(schema: dict, obj: dict, errors: list[FieldError]) -> None:
    props = schema.get("properties") or {}
    trimmed = {k: v for k, v in obj.items() if k not in _ROOT_META_KEYS}
    root_schema = {k: v for k, v in schema.items() if k not in ("properties", "required")}
    root_schema["properties"] = {k: v for k, v in props.items() if k not in _ROOT_META_KEYS}
    root_schema["required"] = [r for r in schema.get("required") or [] if r not in _ROOT_META_KEYS]
    _validate(root_schema, trimmed, "", errors)
    meta_schema = props.get("metadata")
    if isinstance(meta_schema, dict) and isinstance(obj.get("metadata"), dict):
        # Only name/generateName constraints are honoured by the apiserver for root metadata.
        for key in ("name", "generateName"):
            sub = (meta_schema.get("properties") or {}).get(key)
            if isinstance(sub, dict) and key in obj["metadata"]:
                _validate(sub, obj["metadata"][key], f"metadata.{key}", errors)


def _validate(schema: dict, value: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(schema, dict):
        return
    if value is None:
        if schema.get("nullable"):
            return
        if schema.get("x-kubernetes-int-or-string"):
            errors.append(
                type_invalid(path, "null", f'{path} in body must be of type integer,string: "null"')
            )
            return
        if "type" in schema:
            errors.append(
                type_invalid(path, "null", f'{path} in body must be of type {schema["type"]}: "null"')
            )
            return
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
            # Untyped preserved fields: apiserver rejects null unless nullable.
            errors.append(type_invalid(path, "null", f'{path} in body must be of type object: "null"'))
            return
    if schema.get("x-kubernetes-int-or-string"):
        if not (is_json_type(value, "integer") or is_json_type(value, "string")):
            actual = _json_type(value)
            errors.append(
                type_invalid(path, actual, f'{path} in body must be of type integer,string: "{actual}"')
            )
            return
    type_ = schema.get("type")
    if type_ and not is_json_type(value, type_):
        actual = _json_type(value)
        errors.append(type_invalid(path, actual, f'{path} in body must be of type {type_}: "{actual}"'))
        return

    if "enum" in schema and isinstance(schema["enum"], list):
        if not any(_json_equal(value, e) for e in schema["enum"]):
            errors.append(not_supported(path, value, schema["enum"]))

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(schema, value, path, errors)
    elif isinstance(value, str):
        _validate_string(schema, value, path, errors)
    elif isinstance(value, list):
        _validate_array(schema, value, path, errors)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, errors)

    _validate_junctors(schema, value, path, errors)


def _validate_number(schema: dict, value: int | float, path: str, errors: list[FieldError]) -> None:
    if "minimum" in schema and is_json_type(schema["minimum"], "number"):
        m = schema["minimum"]
        if schema.get("exclusiveMinimum") is True:
            if value <= m:
                errors.append(invalid(path, value, f"{path} in body should be greater than {_num(m)}"))
        elif value < m:
            errors.append(
                invalid(path, value, f"{path} in body should be greater than or equal to {_num(m)}")
            )
    if "maximum" in schema and is_json_type(schema["maximum"], "number"):
        m = schema["maximum"]
        if schema.get("exclusiveMaximum") is True:
            if value >= m:
                errors.append(invalid(path, value, f"{path} in body should be less than {_num(m)}"))
        elif value > m:
            errors.append(invalid(path, value, f"{path} in body should be less than or equal to {_num(m)}"))
    mult = schema.get("multipleOf")
    if isinstance(mult, (int, float)) and is_json_type(mult, "number") and mult > 0:
        q = value / mult
        if not (math.isfinite(q) and abs(q - round(q)) < 1e-9):
            errors.append(invalid(path, value, f"{path} in body should be a multiple of {_num(mult)}"))


def _validate_string(schema: dict, value: str, path: str, errors: list[FieldError]) -> None:
    length = len(value)  # characters, as go-openapi counts runes
    if is_json_type(schema.get("maxLength"), "integer") and length > schema["maxLength"]:
        errors.append(too_long(path, schema["maxLength"]))
    if is_json_type(schema.get("minLength"), "integer") and length < schema["minLength"]:
        errors.append(
            invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
        )
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        rx = _compile(pattern)
        if rx is not None and not rx.search(value):
            errors.append(invalid(path, value, f"{path} in body should match '{pattern}'"))
    fmt = schema.get("format")
    check = _STRING_FORMATS.get(fmt) if isinstance(fmt, str) else None
    if check is not None and not check(value):
        errors.append(
            type_invalid(path, value, f"{path} in body must be of type {fmt}: {format_value(value)}")
        )


def _validate_array(schema: dict, value: list, path: str, errors: list[FieldError]) -> None:
    if is_json_type(schema.get("maxItems"), "integer") and len(value) > schema["maxItems"]:
        errors.append(too_many(path, len(value), schema["maxItems"]))
    if is_json_type(schema.get("minItems"), "integer") and len(value) < schema["minItems"]:
        errors.append(invalid(path, value, f"{path} in body should have at least {schema['minItems']} items"))
    if schema.get("uniqueItems") is True:
        if any(_json_equal(a, b) for i, a in enumerate(value) for b in value[i + 1 :]):
            errors.append(invalid(path, value, f"{path} in body shouldn't contain duplicates"))
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, _index(path, i), errors)
    _validate_list_type(schema, value, path, errors)


def _validate_list_type(schema: dict, value: list, path: str, errors: list[FieldError]) -> None:
    """``x-kubernetes-list-type: set|map`` uniqueness (the apiserver reports Duplicate value)."""
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set" and schema.get("uniqueItems") is not True:
        seen: list[Any] = []
        for i, item in enumerate(value):
            if any(_json_equal(item, s) for s in seen):
                errors.append(duplicate(_index(path, i), item))
            else:
                seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[dict] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = {k: item.get(k) for k in keys if k in item}
            if key in seen_keys:
                errors.append(duplicate(_index(path, i), key))
            else:
                seen_keys.append(key)


def _validate_object(schema: dict, value: dict, path: str, errors: list[FieldError]) -> None:
    if is_json_type(schema.get("maxProperties"), "integer") and len(value) > schema["maxProperties"]:
        errors.append(too_many(path, len(value), schema["maxProperties"]))
    if is_json_type(schema.get("minProperties"), "integer") and len(value) < schema["minProperties"]:
        errors.append(
            invalid(path, value, f"{path} in body should have at least {schema['minProperties']} properties")
        )
    for name in schema.get("required") or []:
        if isinstance(name, str) and name not in value:
            errors.append(required(_child(path, name)))
    props = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    for key in sorted(value):
        sub = props.get(key)
        child_path = _child(path, key)
        if isinstance(sub, dict):
            _validate(sub, value[key], child_path, errors)
        elif isinstance(additional, dict):
            _validate(additional, value[key], child_path, errors)
        elif additional is False and not (embedded and key in _ROOT_META_KEYS):
            errors.append(forbidden(child_path, f"{child_path} in body is a forbidden property"))
    if embedded:
        for key in ("apiVersion", "kind"):
            if not isinstance(value.get(key), str) or not value.get(key):
                errors.append(required(_child(path, key), "must not be empty"))


def _validate_junctors(schema: dict, value: Any, path: str, errors: list[FieldError]) -> None:
    shown = path or "body"
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        sub_errors: list[FieldError] = []
        for sub in all_of:
            if isinstance(sub, dict):
                _validate(sub, value, path, sub_errors)
        if sub_errors:
            errors.extend(sub_errors)
            errors.append(invalid(path, "", f'"{shown}" must validate all the schemas (allOf)'))
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [_sub_errors(sub, value, path) for sub in any_of if isinstance(sub, dict)]
        if results and all(results):
            # go-openapi: the composite error, then the errors of the closest alternative
            errors.append(invalid(path, "", f'"{shown}" must validate at least one schema (anyOf)'))
            closest: list[FieldError] = min(results, key=len)
            errors.extend(closest)
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [_sub_errors(sub, value, path) for sub in one_of if isinstance(sub, dict)]
        n = sum(1 for r in results if not r)
        if n != 1:
            reason = "Found none valid" if n == 0 else f"Found {n} valid alternatives"
            errors.append(
                invalid(path, "", f'"{shown}" must validate one and only one schema (oneOf). {reason}')
            )
            if n == 0 and results:
                closest = min(results, key=len)
                errors.extend(closest)
    not_ = schema.get("not")
    if isinstance(not_, dict) and _matches(not_, value, path):
        errors.append(invalid(path, "", f'"{shown}" must not validate the schema (not)'))


def _sub_errors(schema: dict, value: Any, path: str) -> list[FieldError]:
    found: list[FieldError] = []
    _validate(schema, value, path, found)
    return found


def _matches(schema: dict, value: Any, path: str) -> bool:
    return not _sub_errors(schema, value, path)


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return type(a) in (int, float) and type(b) in (int, float) and a == b or (type(a) is type(b) and a == b)


# --------------------------------------------------------------------------------------------------
# defaulting


def apply_defaults(schema: dict, obj: Any) -> Any:
    """Return a copy of ``obj`` with schema ``default`` s applied, like ``structuraldefaulting``.

    For every present object, each missing property that has a ``default`` gets a deep copy of it;
    a ``null`` in a non-nullable property is replaced by its default, or removed when it has none
    (``PruneNonNullableNullsWithoutDefaults``). Recursion continues into the filled-in values, array
    items and ``additionalProperties`` values. ``obj`` itself is never mutated.
    """
    value = json_copy(obj)
    if isinstance(schema, dict):
        _default(schema, value)
    return value


def _default(schema: dict, value: Any) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, prop in props.items():
            if not isinstance(prop, dict):
                continue
            if "default" in prop and prop["default"] is not None:
                if key not in value or (value[key] is None and not prop.get("nullable")):
                    value[key] = json_copy(prop["default"])
            elif key in value and value[key] is None and not prop.get("nullable"):
                del value[key]
        additional = schema.get("additionalProperties")
        for key, child in list(value.items()):
            prop = props.get(key)
            if isinstance(prop, dict):
                _default(prop, child)
            elif isinstance(additional, dict):
                if child is None and not additional.get("nullable"):
                    if "default" in additional and additional["default"] is not None:
                        value[key] = child = json_copy(additional["default"])
                _default(additional, child)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, child in enumerate(value):
                if child is None and not items.get("nullable") and items.get("default") is not None:
                    value[i] = child = json_copy(items["default"])
                _default(items, child)


def json_copy(value: Any) -> Any:
    """Deep copy of JSON data (much faster than copy.deepcopy, and our data is always JSON)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# pruning


def prune(schema: dict, obj: Any) -> Any:
    """Return a copy of ``obj`` without fields the structural schema does not specify.

    Kept regardless of the schema: root ``apiVersion``/``kind``/``metadata`` (metadata whole), and
    the same three keys inside ``x-kubernetes-embedded-resource`` objects. Under
    ``x-kubernetes-preserve-unknown-fields: true`` unknown keys are kept, while known properties
    are still pruned by their own schemas. ``additionalProperties: true`` keeps every key.
    """
    if not isinstance(schema, dict) or not isinstance(obj, dict):
        return json_copy(obj)
    return _prune_object(schema, obj, keep=_ROOT_META_KEYS)


def _prune(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return json_copy(value)
    if schema.get("x-kubernetes-int-or-string"):
        return json_copy(value)
    if isinstance(value, dict):
        keep = _ROOT_META_KEYS if schema.get("x-kubernetes-embedded-resource") else ()
        return _prune_object(schema, value, keep=keep)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune(items, v) for v in value]
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return json_copy(value)
        return [_prune({}, v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def _prune_object(schema: dict, value: dict, keep: tuple[str, ...]) -> dict:
    props = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    out: dict[str, Any] = {}
    for key, child in value.items():
        if key in keep:
            out[key] = json_copy(child)
        elif key in props:
            out[key] = _prune(props[key], child)
        elif isinstance(additional, dict):
            out[key] = _prune(additional, child)
        elif additional is True or preserve:
            out[key] = json_copy(child)
    return out


# --------------------------------------------------------------------------------------------------
# CustomResourceDefinition sanity


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VERSION_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_VALID_TYPES = ("object", "array", "string", "integer", "number", "boolean")


def validate_crd(crd: dict) -> list[FieldError]:
    """Sanity checks a CustomResourceDefinition like the apiserver's CRD validation (subset).

    Covers: names (plural/singular/kind/listKind DNS and kind form), group (a DNS subdomain with a
    dot), ``metadata.name == <plural>.<group>``, scope, versions (at least one, unique names,
    exactly one storage version, at least one served), a schema for every version with
    ``apiextensions.k8s.io/v1``, and a structural-schema check of each schema (types present,
    valid type names, ``metadata`` at the root restricted to name/generateName).
    """
    errors: list[FieldError] = []
    if not isinstance(crd, dict):
        return [invalid("", crd, "must be an object")]
    meta = found if isinstance(found := crd.get("metadata"), dict) else {}
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    group = spec.get("group")
    names = found if isinstance(found := spec.get("names"), dict) else {}
    plural = names.get("plural")

    if not group:
        errors.append(required("spec.group"))
    elif not isinstance(group, str) or not _DNS1123_SUBDOMAIN.match(group):
        errors.append(
            invalid(
                "spec.group",
                group,
                "a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )
        )
    elif "." not in group:
        errors.append(invalid("spec.group", group, "should be a domain with at least one dot"))

    if not plural:
        errors.append(required("spec.names.plural"))
    elif not isinstance(plural, str) or not _DNS1123_LABEL.match(plural):
        errors.append(
            invalid(
                "spec.names.plural",
                plural,
                "a lowercase RFC 1123 label must consist of lower case "
                "alphanumeric characters or '-', and must start and end with an alphanumeric character",
            )
        )
    singular = names.get("singular")
    if singular and (not isinstance(singular, str) or not _DNS1123_LABEL.match(singular)):
        errors.append(
            invalid(
                "spec.names.singular",
                singular,
                "a lowercase RFC 1123 label must consist of lower "
                "case alphanumeric characters or '-', and must start and end with an "
                "alphanumeric character",
            )
        )
    kind = names.get("kind")
    if not kind:
        errors.append(required("spec.names.kind"))
    elif not isinstance(kind, str) or not _KIND_RE.match(kind):
        errors.append(
            invalid(
                "spec.names.kind",
                kind,
                "may have mixed case, but should otherwise match: ^[a-zA-Z][-a-zA-Z0-9]*$",
            )
        )
    list_kind = names.get("listKind")
    if list_kind is not None and (not isinstance(list_kind, str) or not _KIND_RE.match(list_kind)):
        errors.append(
            invalid(
                "spec.names.listKind",
                list_kind,
                "may have mixed case, but should otherwise match: ^[a-zA-Z][-a-zA-Z0-9]*$",
            )
        )
    elif list_kind is not None and list_kind == kind:
        errors.append(invalid("spec.names.listKind", list_kind, "kind and listKind may not be the same"))

    if plural and group and isinstance(plural, str) and isinstance(group, str):
        expected = f"{plural}.{group}"
        if meta.get("name") != expected:
            errors.append(
                invalid("metadata.name", meta.get("name"), 'must be spec.names.plural+"."+spec.group')
            )

    scope = spec.get("scope")
    if not scope:
        errors.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errors.append(not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))

    versions = spec.get("versions")
    is_v1 = crd.get("apiVersion", "apiextensions.k8s.io/v1") == "apiextensions.k8s.io/v1"
    if not isinstance(versions, list) or not versions:
        errors.append(
            invalid(
                "spec.versions",
                versions if versions is not None else [],
                "must have exactly one version marked as storage version",
            )
        )
        return errors
    storage = 0
    served = 0
    seen: set[str] = set()
    for i, version in enumerate(versions):
        vpath = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            errors.append(invalid(vpath, version, "must be an object"))
            continue
        vname = version.get("name")
        if not vname:
            errors.append(required(f"{vpath}.name"))
        elif not isinstance(vname, str) or not _VERSION_RE.match(vname):
            errors.append(
                invalid(
                    f"{vpath}.name",
                    vname,
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-'",
                )
            )
        elif vname in seen:
            errors.append(duplicate(f"{vpath}.name", vname))
        else:
            seen.add(vname)
        if version.get("storage") is True:
            storage += 1
        if version.get("served") is True:
            served += 1
        for flag in ("served", "storage"):
            if is_v1 and not isinstance(version.get(flag), bool):
                errors.append(required(f"{vpath}.{flag}"))
        schema = (
            (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(version.get("schema"), dict)
            else None
        )
        if schema is None:
            schema = (spec.get("validation") or {}).get("openAPIV3Schema") if not is_v1 else None
        spath = f"{vpath}.schema.openAPIV3Schema"
        if schema is None:
            if is_v1:
                errors.append(required(spath, "schemas are required"))
        elif not isinstance(schema, dict):
            errors.append(invalid(spath, schema, "must be an object"))
        else:
            errors.extend(_structural_errors(schema, spath, root=True))
    if storage != 1:
        errors.append(
            invalid("spec.versions", versions, "must have exactly one version marked as storage version")
        )
    if served == 0 and is_v1:
        errors.append(invalid("spec.versions", versions, "must have at least one version marked as served"))
    return errors


def _structural_errors(schema: dict, path: str, root: bool = False) -> list[FieldError]:
    """The structural-schema rules that matter in practice (a subset of NewStructural + validation)."""
    errors: list[FieldError] = []
    type_ = schema.get("type")
    int_or_string = bool(schema.get("x-kubernetes-int-or-string"))
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    if root and type_ != "object":
        if not type_:
            errors.append(required(f"{path}.type", "must not be empty at the root"))
        else:
            errors.append(invalid(f"{path}.type", type_, "must be object at the root"))
    elif type_ is None and not int_or_string and not preserve:
        errors.append(required(f"{path}.type", "must not be empty for specified object fields"))
    elif type_ is not None and type_ not in _VALID_TYPES:
        errors.append(not_supported(f"{path}.type", type_, _VALID_TYPES))
    if int_or_string and type_ is not None:
        errors.append(invalid(f"{path}.type", type_, "must be empty if x-kubernetes-int-or-string is true"))
    if embedded and type_ != "object":
        errors.append(
            invalid(f"{path}.type", type_, "must be object if x-kubernetes-embedded-resource is true")
        )
    if "pattern" in schema and (
        not isinstance(schema["pattern"], str) or _compile(schema["pattern"]) is None
    ):
        errors.append(invalid(f"{path}.pattern", schema["pattern"], "must be a valid regular expression"))
    if schema.get("uniqueItems") is True:
        errors.append(
            forbidden(
                f"{path}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    if props and isinstance(additional, dict):
        errors.append(
            forbidden(
                f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
            )
        )
    if type_ == "array" and not isinstance(schema.get("items"), dict):
        errors.append(required(f"{path}.items", "must be specified"))
    if isinstance(props, dict):
        for key in sorted(props):
            sub = props[key]
            sub_path = f"{path}.properties[{key}]"
            if not isinstance(sub, dict):
                errors.append(invalid(sub_path, sub, "must be an object"))
                continue
            if root and key == "metadata":
                errors.extend(_root_metadata_errors(sub, sub_path))
                continue
            errors.extend(_structural_errors(sub, sub_path))
    if isinstance(schema.get("items"), dict):
        errors.extend(_structural_errors(schema["items"], f"{path}.items"))
    if isinstance(additional, dict):
        errors.extend(_structural_errors(additional, f"{path}.additionalProperties"))
    if "default" in schema:
        if root:
            errors.append(forbidden(f"{path}.default", "must not be set at the root"))
        else:
            default_errors = validate(
                schema, apply_defaults(schema, prune(schema, schema["default"])), f"{path}.default"
            )
            errors.extend(default_errors)
    return errors


def _root_metadata_errors(schema: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if schema.get("type") not in (None, "object"):
        errors.append(invalid(f"{path}.type", schema.get("type"), "must be object"))
    for key in schema.get("properties") or {}:
        if key not in ("name", "generateName"):
            errors.append(forbidden(f"{path}.properties[{key}]", "must not be specified"))
    return errors
