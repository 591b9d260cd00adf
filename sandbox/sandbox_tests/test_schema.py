"""CRD structural schema: validation messages/paths, defaulting, pruning, CRD sanity."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ansible_operator_sandbox.schema import (
    FieldError,
    apply_defaults,
    invalid_message,
    is_json_type,
    prune,
    validate,
    validate_crd,
)

# A realistic operator CRD schema (Memcached-like with the features roles actually use).
MEMCACHED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1, "format": "int32"},
                "image": {
                    "type": "string",
                    "pattern": "^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$",
                    "default": "memcached:1.6",
                },
                "mode": {"type": "string", "enum": ["standalone", "cluster"], "default": "standalone"},
                "port": {"x-kubernetes-int-or-string": True},
                "ratio": {
                    "type": "number",
                    "exclusiveMinimum": True,
                    "minimum": 0,
                    "exclusiveMaximum": True,
                    "maximum": 1,
                    "multipleOf": 0.25,
                },
                "debug": {"type": "boolean"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 8}},
                "tags": {
                    "type": "array",
                    "maxItems": 3,
                    "minItems": 1,
                    "items": {"type": "string", "minLength": 2},
                },
                "startAt": {"type": "string", "format": "date-time"},
                "note": {"type": "string", "nullable": True},
                "extra": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}},
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "storage": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "class": {"type": "string", "default": "standard"},
                        "size": {"type": "string", "default": "1Gi"},
                    },
                },
                "containers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "maxLength": 5},
                            "pullPolicy": {
                                "type": "string",
                                "default": "IfNotPresent",
                                "enum": ["Always", "IfNotPresent", "Never"],
                            },
                            "env": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
                                },
                            },
                        },
                    },
                },
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def cr(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "metadata": {"name": "mc", "namespace": "default"},
        "spec": spec,
    }


# --------------------------------------------------------------------------------------------------
# validation: one row per rule → (spec, field, reason, message)

INVALID_CASES = [
    pytest.param(
        {"size": 0},
        "spec.size",
        "FieldValueInvalid",
        "Invalid value: 0: spec.size in body should be greater than or equal to 1",
        id="minimum",
    ),
    pytest.param(
        {"size": 11},
        "spec.size",
        "FieldValueInvalid",
        "Invalid value: 11: spec.size in body should be less than or equal to 10",
        id="maximum",
    ),
    pytest.param(
        {"size": "3"},
        "spec.size",
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.size in body must be of type integer: "string"',
        id="type-string",
    ),
    pytest.param(
        {"size": True},
        "spec.size",
        "FieldValueTypeInvalid",
        'Invalid value: "boolean": spec.size in body must be of type integer: "boolean"',
        id="bool-not-int",
    ),
    pytest.param(
        {"size": 2.5},
        "spec.size",
        "FieldValueTypeInvalid",
        'Invalid value: "number": spec.size in body must be of type integer: "number"',
        id="float-not-int",
    ),
    pytest.param(
        {"size": 2**64},
        "spec.size",
        "FieldValueTypeInvalid",
        'Invalid value: "number": spec.size in body must be of type integer: "number"',
        id="beyond-int64-is-number",
    ),
    pytest.param(
        {"size": 1, "mode": "ha"},
        "spec.mode",
        "FieldValueNotSupported",
        'Unsupported value: "ha": supported values: "standalone", "cluster"',
        id="enum",
    ),
    pytest.param(
        {"size": 1, "image": "Bad Image"},
        "spec.image",
        "FieldValueInvalid",
        "Invalid value: \"Bad Image\": spec.image in body should match '^[a-z0-9./-]+(:[A-Za-z0-9._-]+)?$'",
        id="pattern",
    ),
    pytest.param(
        {"size": 1, "port": True},
        "spec.port",
        "FieldValueTypeInvalid",
        'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"',
        id="int-or-string",
    ),
    pytest.param(
        {"size": 1, "ratio": 0},
        "spec.ratio",
        "FieldValueInvalid",
        "Invalid value: 0: spec.ratio in body should be greater than 0",
        id="exclusiveMinimum",
    ),
    pytest.param(
        {"size": 1, "ratio": 1},
        "spec.ratio",
        "FieldValueInvalid",
        "Invalid value: 1: spec.ratio in body should be less than 1",
        id="exclusiveMaximum",
    ),
    pytest.param(
        {"size": 1, "ratio": 0.3},
        "spec.ratio",
        "FieldValueInvalid",
        "Invalid value: 0.3: spec.ratio in body should be a multiple of 0.25",
        id="multipleOf",
    ),
    pytest.param(
        {"size": 1, "debug": "yes"},
        "spec.debug",
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.debug in body must be of type boolean: "string"',
        id="boolean",
    ),
    pytest.param(
        {"size": 1, "labels": {"app": "far-too-long"}},
        "spec.labels.app",
        "FieldValueTooLong",
        "Too long: may not be longer than 8",
        id="map-value-maxLength",
    ),
    pytest.param(
        {"size": 1, "labels": {"app": 3}},
        "spec.labels.app",
        "FieldValueTypeInvalid",
        'Invalid value: "integer": spec.labels.app in body must be of type string: "integer"',
        id="map-value-type",
    ),
    pytest.param(
        {"size": 1, "tags": ["aa", "bb", "cc", "dd"]},
        "spec.tags",
        "FieldValueTooMany",
        "Too many: 4: must have at most 3 items",
        id="maxItems",
    ),
    pytest.param(
        {"size": 1, "tags": []},
        "spec.tags",
        "FieldValueInvalid",
        "Invalid value: []: spec.tags in body should have at least 1 items",
        id="minItems",
    ),
    pytest.param(
        {"size": 1, "tags": ["aa", "b"]},
        "spec.tags[1]",
        "FieldValueInvalid",
        'Invalid value: "b": spec.tags[1] in body should be at least 2 chars long',
        id="minLength",
    ),
    pytest.param(
        {"size": 1, "startAt": "yesterday"},
        "spec.startAt",
        "FieldValueTypeInvalid",
        'Invalid value: "yesterday": spec.startAt in body must be of type date-time: "yesterday"',
        id="date-time",
    ),
    pytest.param(
        {"size": 1, "containers": [{"name": "a"}, {"image": "x"}]},
        "spec.containers[1].name",
        "FieldValueRequired",
        "Required value",
        id="required-in-array",
    ),
    pytest.param(
        {"size": 1, "containers": [{"name": "toolong"}]},
        "spec.containers[0].name",
        "FieldValueTooLong",
        "Too long: may not be longer than 5",
        id="maxLength-in-array",
    ),
    pytest.param(
        {"size": 1, "containers": [{"name": "a", "pullPolicy": "Sometimes"}]},
        "spec.containers[0].pullPolicy",
        "FieldValueNotSupported",
        'Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"',
        id="enum-in-array",
    ),
    pytest.param(
        {"size": 1, "containers": [{"name": "a", "env": [{"name": 1}]}]},
        "spec.containers[0].env[0].name",
        "FieldValueTypeInvalid",
        'Invalid value: "integer": spec.containers[0].env[0].name in body must be of type string: "integer"',
        id="deep-path",
    ),
    pytest.param(
        {"size": None},
        "spec.size",
        "FieldValueTypeInvalid",
        'Invalid value: "null": spec.size in body must be of type integer: "null"',
        id="null-not-nullable",
    ),
    pytest.param(
        {"size": 1, "containers": {"name": "a"}},
        "spec.containers",
        "FieldValueTypeInvalid",
        'Invalid value: "object": spec.containers in body must be of type array: "object"',
        id="array-type",
    ),
    pytest.param(
        {"size": 1, "template": {"kind": "Pod"}},
        "spec.template.apiVersion",
        "FieldValueRequired",
        "Required value: must not be empty",
        id="embedded-resource-apiVersion",
    ),
]


@pytest.mark.parametrize(("spec", "field", "reason", "message"), INVALID_CASES)
def test_validate_reports_apiserver_style_errors(spec: dict, field: str, reason: str, message: str) -> None:
    errors = validate(MEMCACHED_SCHEMA, cr(**spec))
    assert [e.cause() for e in errors] == [{"reason": reason, "message": message, "field": field}]


def test_missing_required_property() -> None:
    errors = validate(MEMCACHED_SCHEMA, cr())
    assert errors == [FieldError("FieldValueRequired", "spec.size", "Required value")]


VALID_SPECS = [
    pytest.param({"size": 3}, id="minimal"),
    pytest.param({"size": 3, "port": 11211}, id="int-or-string-int"),
    pytest.param({"size": 3, "port": "memcache"}, id="int-or-string-string"),
    pytest.param({"size": 3, "ratio": 0.5}, id="multipleOf-float"),
    pytest.param({"size": 3, "note": None}, id="nullable-null"),
    pytest.param({"size": 3, "startAt": "2026-11-22T13:50:00Z"}, id="date-time-ok"),
    pytest.param({"size": 3, "startAt": "2026-11-22T13:50:00.123+02:00"}, id="date-time-offset"),
    pytest.param({"size": 3, "extra": {"anything": [1, {"x": None}], "known": {"a": "b"}}}, id="preserve"),
    pytest.param(
        {
            "size": 3,
            "template": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c"},
                "data": {"a": "b"},
            },
        },
        id="embedded-resource",
    ),
    pytest.param({"size": 3, "labels": {}}, id="empty-map"),
    pytest.param({"size": 10, "image": "quay.io/org/memcached:1.6.21"}, id="bounds-and-pattern"),
    # unstructured decoding makes 2.0 a float64, and kube-openapi takes an integral float64 as an integer
    pytest.param({"size": 2.0, "port": 8080.0}, id="integral-float-is-integer"),
]


@pytest.mark.parametrize("spec", VALID_SPECS)
def test_valid_objects_have_no_errors(spec: dict) -> None:
    assert validate(MEMCACHED_SCHEMA, cr(**spec)) == []


def test_root_apiversion_kind_metadata_not_validated_against_schema() -> None:
    schema = {"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}}
    obj = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {}}
    assert validate(schema, obj) == []
    assert [str(e) for e in validate(schema, {"apiVersion": "x/v1", "kind": "X", "metadata": {}})] == [
        "spec: Required value"
    ]


def test_root_metadata_name_constraint_is_enforced() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}
        },
    }
    errors = validate(schema, {"metadata": {"name": "toolong"}})
    assert [str(e) for e in errors] == ["metadata.name: Too long: may not be longer than 3"]


def test_multiple_errors_are_all_reported_in_stable_order() -> None:
    errors = validate(MEMCACHED_SCHEMA, cr(size=0, mode="x", containers=[{}]))
    assert [e.field for e in errors] == ["spec.containers[0].name", "spec.mode", "spec.size"]


def test_path_prefix() -> None:
    errors = validate({"type": "integer", "minimum": 1}, 0, "spec.replicas")
    assert (
        str(errors[0])
        == "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
    )


def test_numeric_enum_values_are_quoted_like_the_apiserver() -> None:
    errors = validate({"type": "object", "properties": {"n": {"type": "integer", "enum": [1, 2]}}}, {"n": 3})
    assert errors[0].message == 'Unsupported value: 3: supported values: "1", "2"'


def test_number_accepts_int_and_float() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    assert validate(schema, {"x": 1}) == []
    assert validate(schema, {"x": 1.5}) == []
    assert validate(schema, {"x": False})[0].message.startswith('Invalid value: "boolean"')


@pytest.mark.parametrize("value, type_, fmt, unstructured, typed", [
    # value, OpenAPI type and format, is it that type for a custom resource? for a built-in's Go field?
    (3, "integer", None, True, True),
    (2.0, "integer", None, True, False),  # kube-openapi: an integral float64; encoding/json: not an int
    (2.5, "integer", None, False, False),
    (float(2**53 - 1), "integer", None, True, False),
    (float(2**53), "integer", None, False, False),  # beyond swag.IsFloat64AJSONInteger's range
    (float("inf"), "integer", None, False, False),
    (2**63 - 1, "integer", "int64", True, True),
    (2**63, "integer", "int64", False, False),  # no int64: a float64 beyond 2**53 either way
    (-(2**63), "integer", None, True, True),
    (2**31, "integer", "int32", True, False),  # CRD formats are not range-checked; a Go int32 overflows
    (-(2**31), "integer", "int32", True, True),
    (True, "integer", None, False, False),
    (True, "number", None, False, False),
    (1.5, "number", "double", True, True),
    (2**70, "number", None, True, True),
    ("3", "integer", None, False, False),
    (None, "null", None, True, True),
    ({}, "object", None, True, True),
    ([], "object", None, False, False),
    ("x", None, None, True, True),  # no type: anything
])
def test_is_json_type_for_custom_resources_and_builtins(value: Any, type_: str | None, fmt: str | None,
                                                       unstructured: bool, typed: bool) -> None:
    assert is_json_type(value, type_, fmt) is unstructured
    assert is_json_type(value, type_, fmt, typed=True) is typed


def test_additional_properties_false_and_min_max_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "integer"}},
            "n": {"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}},
        },
    }
    errors = validate(schema, {"m": {"a": 1, "b": 2}, "n": {"a": 1}})
    assert [str(e) for e in errors] == [
        "m: Too many: 2: must have at most 1 items",
        'n: Invalid value: {"a":1}: n in body should have at least 2 properties',
    ]


def test_unique_items_and_list_type_set_and_map() -> None:
    schema = {
        "type": "object",
        "properties": {
            "u": {"type": "array", "uniqueItems": True, "items": {"type": "string"}},
            "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "m": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "v": {"type": "string"}},
                },
            },
        },
    }
    errors = validate(
        schema,
        {"u": ["a", "a"], "s": ["x", "y", "x"], "m": [{"name": "a", "v": "1"}, {"name": "a", "v": "2"}]},
    )
    assert [str(e) for e in errors] == [
        'm[1]: Duplicate value: {"name":"a"}',
        's[2]: Duplicate value: "x"',
        'u: Invalid value: ["a","a"]: u in body shouldn\'t contain duplicates',
    ]


_TYPE_ERR = 'x: Invalid value: "string": x in body must be of type integer: "string"'


@pytest.mark.parametrize(
    ("keyword", "value", "expected"),
    [
        # the composite error, then the errors of the closest failing alternative (as go-openapi reports)
        ("anyOf", "abc", ['x: Invalid value: "": "x" must validate at least one schema (anyOf)', _TYPE_ERR]),
        (
            "oneOf",
            5,
            [
                'x: Invalid value: "": "x" must validate one and only one schema (oneOf). '
                "Found 2 valid alternatives"
            ],
        ),
        (
            "oneOf",
            "abc",
            [
                'x: Invalid value: "": "x" must validate one and only one schema (oneOf). Found none valid',
                _TYPE_ERR,
            ],
        ),
        (
            "anyOf",
            0,
            [
                'x: Invalid value: "": "x" must validate at least one schema (anyOf)',
                "x: Invalid value: 0: x in body should be greater than or equal to 5",
            ],
        ),
    ],
)
def test_junctors(keyword: str, value: Any, expected: list[str]) -> None:
    schema = {
        "type": "object",
        "properties": {
            "x": {
                "x-kubernetes-int-or-string": True,
                keyword: [
                    {"type": "integer", "minimum": 5},
                    {"type": "integer", "maximum": 10, "minimum": 1},
                ],
            }
        },
    }
    assert [str(e) for e in validate(schema, {"x": value})] == expected
    assert validate(schema, {"x": 42 if keyword == "oneOf" else 7}) == []


def test_allof_and_not() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer", "allOf": [{"minimum": 2}], "not": {"enum": [7]}}},
    }
    assert [str(e) for e in validate(schema, {"x": 1})] == [
        "x: Invalid value: 1: x in body should be greater than or equal to 2",
        'x: Invalid value: "": "x" must validate all the schemas (allOf)',
    ]
    assert [str(e) for e in validate(schema, {"x": 7})] == [
        'x: Invalid value: "": "x" must not validate the schema (not)'
    ]


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date", "2026-11-22", "2026-13-01"),
        ("byte", "aGVsbG8=", "not base64!"),
        ("uuid", "8f1c2a9e-5b7d-4c3e-9a1f-0123456789ab", "1234"),
        ("ipv4", "10.0.0.1", "10.0.0.256"),
        ("ipv6", "::1", "10.0.0.1"),
        ("cidr", "10.0.0.0/8", "10.0.0.0"),
        ("hostname", "a.example.com", "-bad-"),
        ("email", "a@b.c", "nope"),
        ("duration", "1h30m", "soon"),
    ],
)
def test_string_formats(fmt: str, good: str, bad: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert validate(schema, {"v": good}) == []
    errors = validate(schema, {"v": bad})
    assert len(errors) == 1 and errors[0].type == "FieldValueTypeInvalid"
    assert errors[0].message.endswith(f'v in body must be of type {fmt}: "{bad}"')


def test_unknown_format_is_ignored() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": "password"}}}
    assert validate(schema, {"v": "anything"}) == []


# --------------------------------------------------------------------------------------------------
# invalid_message


def test_invalid_message_single_and_many() -> None:
    one = [FieldError("FieldValueRequired", "spec.size", "Required value")]
    assert invalid_message("Memcached.cache.example.com", "mc", one) == (
        'Memcached.cache.example.com "mc" is invalid: spec.size: Required value'
    )
    errors = validate(MEMCACHED_SCHEMA, cr(size=0, mode="x"))
    assert invalid_message("Memcached.cache.example.com", "mc", errors) == (
        'Memcached.cache.example.com "mc" is invalid: [spec.mode: Unsupported value: "x": supported values: '
        '"standalone", "cluster", spec.size: Invalid value: 0: spec.size in body should be greater than or '
        "equal to 1]"
    )


# --------------------------------------------------------------------------------------------------
# defaulting


def test_defaults_fill_missing_properties_recursively() -> None:
    obj = cr(size=2, containers=[{"name": "a"}, {"name": "b", "pullPolicy": "Always"}])
    before = copy.deepcopy(obj)
    out = apply_defaults(MEMCACHED_SCHEMA, obj)
    assert obj == before, "input must not be mutated"
    assert out["spec"] == {
        "size": 2,
        "image": "memcached:1.6",
        "mode": "standalone",
        "storage": {"class": "standard", "size": "1Gi"},  # default {} then defaulted inside
        "containers": [{"name": "a", "pullPolicy": "IfNotPresent"}, {"name": "b", "pullPolicy": "Always"}],
    }


def test_defaults_do_not_create_absent_parent_objects() -> None:
    obj = {"apiVersion": "v", "kind": "Memcached", "metadata": {"name": "x"}}
    assert apply_defaults(MEMCACHED_SCHEMA, obj) == obj


def test_defaults_replace_null_in_non_nullable_and_drop_null_without_default() -> None:
    out = apply_defaults(MEMCACHED_SCHEMA, cr(size=None, debug=None, note=None))
    assert out["spec"]["size"] == 1
    assert "debug" not in out["spec"]
    assert out["spec"]["note"] is None  # nullable: kept


def test_defaults_in_additional_properties_and_explicit_values_win() -> None:
    schema = {
        "type": "object",
        "properties": {
            "m": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {"p": {"type": "integer", "default": 80}},
                },
            }
        },
    }
    assert apply_defaults(schema, {"m": {"a": {}, "b": {"p": 1}}}) == {"m": {"a": {"p": 80}, "b": {"p": 1}}}


def test_defaulted_object_is_independent_copy() -> None:
    out1 = apply_defaults(MEMCACHED_SCHEMA, cr(size=1))
    out1["spec"]["storage"]["class"] = "changed"
    out2 = apply_defaults(MEMCACHED_SCHEMA, cr(size=1))
    assert out2["spec"]["storage"]["class"] == "standard"
    assert MEMCACHED_SCHEMA["properties"]["spec"]["properties"]["storage"]["default"] == {}


# --------------------------------------------------------------------------------------------------
# pruning


def test_prune_drops_unknown_fields_but_keeps_root_meta() -> None:
    obj = cr(
        size=1, unknown="x", containers=[{"name": "a", "bogus": 1, "env": [{"name": "E", "junk": True}]}]
    )
    obj["metadata"]["whatever"] = {"kept": True}
    obj["toplevel"] = 1
    obj["status"] = {"anything": {"goes": 1}}
    out = prune(MEMCACHED_SCHEMA, obj)
    assert out == {
        "apiVersion": "cache.example.com/v1alpha1",
        "kind": "Memcached",
        "metadata": {"name": "mc", "namespace": "default", "whatever": {"kept": True}},
        "spec": {"size": 1, "containers": [{"name": "a", "env": [{"name": "E"}]}]},
        "status": {"anything": {"goes": 1}},
    }
    assert "unknown" in obj["spec"], "input must not be mutated"


def test_prune_preserve_unknown_still_prunes_known_properties() -> None:
    out = prune(MEMCACHED_SCHEMA, cr(extra={"free": {"x": 1}, "known": {"a": "b", "z": 1}}))
    assert out["spec"]["extra"] == {"free": {"x": 1}, "known": {"a": "b"}}


def test_prune_embedded_resource_keeps_type_meta() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "tpl": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
                    }
                },
            }
        },
    }
    obj = {
        "spec": {
            "tpl": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"a": "x", "b": "y"},
                "other": 1,
            }
        }
    }
    assert prune(schema, obj) == {
        "spec": {"tpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": "x"}}}
    }


def test_prune_object_without_properties_becomes_empty_and_additional_true_keeps_all() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object"}, "b": {"type": "object", "additionalProperties": True}},
    }
    assert prune(schema, {"a": {"x": 1}, "b": {"y": 2}}) == {"a": {}, "b": {"y": 2}}


def test_prune_keeps_int_or_string_and_scalars() -> None:
    assert prune(MEMCACHED_SCHEMA, cr(size=1, port="http"))["spec"] == {"size": 1, "port": "http"}


def test_prune_default_validate_pipeline() -> None:
    """The server's order: prune → default → validate."""
    raw = cr(size=3, mystery=True, containers=[{"name": "web", "x": 1}])
    obj = apply_defaults(MEMCACHED_SCHEMA, prune(MEMCACHED_SCHEMA, raw))
    assert validate(MEMCACHED_SCHEMA, obj) == []
    assert obj["spec"]["containers"] == [{"name": "web", "pullPolicy": "IfNotPresent"}]
    assert "mystery" not in obj["spec"]


# --------------------------------------------------------------------------------------------------
# CRD sanity


def crd(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "memcacheds.cache.example.com"},
        "spec": {
            "group": "cache.example.com",
            "names": {
                "plural": "memcacheds",
                "singular": "memcached",
                "kind": "Memcached",
                "listKind": "MemcachedList",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": MEMCACHED_SCHEMA},
                }
            ],
        },
    }
    for path, value in overrides.items():
        target = base
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[k]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return base


_DELETE = object()


def test_valid_crd() -> None:
    assert validate_crd(crd()) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"metadata__name": "wrong"},
            'metadata.name: Invalid value: "wrong": must be spec.names.plural+"."+spec.group',
        ),
        ({"spec__group": _DELETE}, "spec.group: Required value"),
        (
            {"spec__group": "nodot"},
            'spec.group: Invalid value: "nodot": should be a domain with at least one dot',
        ),
        ({"spec__names__plural": _DELETE}, "spec.names.plural: Required value"),
        ({"spec__names__kind": _DELETE}, "spec.names.kind: Required value"),
        (
            {"spec__scope": "Global"},
            'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
        ),
        (
            {"spec__versions": []},
            ("spec.versions: Invalid value: []: must have exactly one version marked as storage version"),
        ),
    ],
)
def test_invalid_crd(overrides: dict[str, Any], expected: str) -> None:
    messages = [str(e) for e in validate_crd(crd(**overrides))]
    assert expected in messages


def test_crd_storage_versions_and_schema_required() -> None:
    c = crd()
    c["spec"]["versions"] = [
        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": True, "storage": True},
    ]
    messages = [str(e) for e in validate_crd(c)]
    assert "spec.versions[1].schema.openAPIV3Schema: Required value: schemas are required" in messages
    assert any(
        m.startswith("spec.versions: Invalid value:")
        and m.endswith("must have exactly one version marked as storage version")
        for m in messages
    )


def test_crd_structural_schema_checks() -> None:
    c = crd()
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {
                "type": "object",
                "properties": {
                    "untyped": {"description": "no type"},
                    "list": {"type": "array"},
                    "bad": {"type": "strin"},
                    "n": {"type": "integer", "minimum": 1, "default": 0},
                },
            },
        },
    }
    messages = [str(e) for e in validate_crd(c)]
    p = "spec.versions[0].schema.openAPIV3Schema"
    assert f"{p}.properties[metadata].properties[labels]: Forbidden: must not be specified" in messages
    assert (
        f"{p}.properties[spec].properties[untyped].type: Required value: must not be empty for specified "
        "object fields" in messages
    )
    assert f"{p}.properties[spec].properties[list].items: Required value: must be specified" in messages
    assert any(
        m.startswith(f'{p}.properties[spec].properties[bad].type: Unsupported value: "strin"')
        for m in messages
    )
    assert any("should be greater than or equal to 1" in m and "properties[n].default" in m for m in messages)


def test_crd_root_must_be_object() -> None:
    c = crd()
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = {"properties": {}}
    assert [str(e) for e in validate_crd(c)] == [
        "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root"
    ]


# --------------------------------------------------------------------------------------------------
# real-world CRDs: what `operator-sdk create api` (ansible plugin) and kubebuilder generate

OPERATOR_SDK_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "memcacheds.cache.example.com"},
    "spec": {
        "group": "cache.example.com",
        "names": {
            "kind": "Memcached",
            "listKind": "MemcachedList",
            "plural": "memcacheds",
            "singular": "memcached",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "description": "Memcached is the Schema for the memcacheds API",
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

CONDITIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {
        "type": "object",
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        "properties": {
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "message": {"type": "string", "maxLength": 32768},
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "reason": {
                "type": "string",
                "maxLength": 1024,
                "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            },
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "type": {
                "type": "string",
                "maxLength": 316,
                "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            },
        },
    },
}


def test_operator_sdk_generated_crd_is_valid_and_keeps_free_form_spec() -> None:
    assert validate_crd(OPERATOR_SDK_CRD) == []
    schema = OPERATOR_SDK_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = cr(size=3, nested={"a": [1, {"b": None}]})
    obj["status"] = {"conditions": [{"type": "Running"}]}
    obj["bogus"] = True
    out = apply_defaults(schema, prune(schema, obj))
    assert "bogus" not in out
    assert out["spec"] == {"size": 3, "nested": {"a": [1, {"b": None}]}}
    assert validate(schema, out) == []


def test_metav1_condition_list() -> None:
    schema = {
        "type": "object",
        "properties": {"status": {"type": "object", "properties": {"conditions": CONDITIONS_SCHEMA}}},
    }
    good = {
        "type": "Ready",
        "status": "True",
        "reason": "Reconciled",
        "message": "",
        "lastTransitionTime": "2026-11-22T13:50:00Z",
        "observedGeneration": 3,
    }
    assert validate(schema, {"status": {"conditions": [good]}}) == []
    bad = dict(good, type="Synced", status="Yes", reason="not valid!", lastTransitionTime="now")
    del bad["message"]
    errors = validate(schema, {"status": {"conditions": [good, bad, good]}})
    c1 = "status.conditions[1]"
    assert [str(e) for e in errors] == [
        f"{c1}.message: Required value",
        f'{c1}.lastTransitionTime: Invalid value: "now": {c1}.lastTransitionTime in body must be of type '
        'date-time: "now"',
        f'{c1}.reason: Invalid value: "not valid!": {c1}.reason in body should match '
        "'^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
        f'{c1}.status: Unsupported value: "Yes": supported values: "True", "False", "Unknown"',
        'status.conditions[2]: Duplicate value: {"type":"Ready"}',
    ]


def test_pattern_digits_are_ascii_like_go_re2() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": r"^\d+$"}}}
    assert validate(schema, {"v": "123"}) == []
    assert len(validate(schema, {"v": "١٢٣"})) == 1  # Arabic-Indic digits are not \d in RE2
