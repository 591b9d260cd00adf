"""Kubernetes protobuf bodies: decoding from the upstream descriptors, encoding, and protobuf-only
responses."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from ansible_operator_sandbox import protobuf
from ansible_operator_sandbox.testing import SandboxHandle


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw)


def test_decodes_hand_built_wire_bytes_by_upstream_field_numbers():
    # ConfigMap: metadata=1 (ObjectMeta name=1, namespace=3, generateName=2 sent empty as gogo does), data=2
    # (map)
    meta = _field(1, b"cfg") + _field(2, b"") + _field(3, b"ns")
    entry = _field(1, b"k") + _field(2, b"v")
    obj = protobuf.decode(_envelope("v1", "ConfigMap", _field(1, meta) + _field(2, entry)))
    assert obj == {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "cfg", "namespace": "ns"},
                   "data": {"k": "v"}}


DEPLOYMENT: dict[str, Any] = {
    "kind": "Deployment", "apiVersion": "apps/v1",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                 "creationTimestamp": "2026-01-02T03:04:05Z",
                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1",
                                      "controller": False}]},
    "spec": {
        "replicas": 0,  # a pointer: zero is kept (omitting it would mean 1)
        "selector": {"matchLabels": {"app": "web"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [{
                    "name": "nginx", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "web-config", "defaultMode": 420}}],
                "automountServiceAccountToken": False}}},
}


def test_round_trip_keeps_int_or_string_quantity_time_pointer_zeros_and_inline_members():
    wire = protobuf.encode(DEPLOYMENT)
    assert wire.startswith(protobuf.MAGIC)
    assert protobuf.decode(wire) == DEPLOYMENT


def test_json_names_come_from_the_go_tags_not_protoc_camel_case():
    webhook_config = {
        "kind": "ValidatingWebhookConfiguration",
        "apiVersion": "admissionregistration.k8s.io/v1",
        "metadata": {"name": "w"},
        "webhooks": [
            {
                "name": "w.example.com",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://example.com"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }
    assert protobuf.decode(protobuf.encode(webhook_config)) == webhook_config
    crd = {
        "kind": "CustomResourceDefinition",
        "apiVersion": "apiextensions.k8s.io/v1",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                    "additionalProperties": False,
                                },
                                "tags": {"type": "array", "items": {"type": "string"}},
                                "size": {"type": "integer", "default": 3, "x-kubernetes-int-or-string": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    assert protobuf.decode(protobuf.encode(crd)) == crd


def test_micro_time_and_durations():
    lease = {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"name": "l"},
             "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                      "renewTime": "2026-01-02T03:04:05.123456Z"}}
    assert protobuf.decode(protobuf.encode(lease)) == lease
    assert [protobuf._go_duration(n) for n in (0, 1500, 2_500_000_000, 3_600_000_000_000, 90 * 10**9)] == \
        ["0s", "1.5µs", "2.5s", "1h0m0s", "1m30s"]
    assert protobuf._parse_duration("1h30m") == 5400 * 10**9


def test_bad_bodies_raise():
    with pytest.raises(protobuf.ProtobufError, match="magic"):
        protobuf.decode(b'{"kind": "ConfigMap"}')
    with pytest.raises(protobuf.ProtobufError, match="no protobuf message"):
        protobuf.decode(_envelope("example.com/v1", "Widget", b""))
    with pytest.raises(protobuf.ProtobufError, match="malformed"):
        protobuf.decode(protobuf.MAGIC + b"\x0a\xff\xff")


def _request(sandbox: SandboxHandle, method: str, path: str, accept: str, body: bytes | None = None,
             content_type: str | None = None) -> tuple[int, str, bytes]:
    req = urllib.request.Request(sandbox.url + path, data=body, method=method, headers={"Accept": accept})
    if content_type:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def test_server_reads_protobuf_and_answers_protobuf_only_clients(sandbox: SandboxHandle):
    body = protobuf.encode(dict(DEPLOYMENT, metadata={"name": "web", "labels": {"app": "web"}}))
    code, ctype, raw = _request(sandbox, "POST", "/apis/apps/v1/namespaces/default/deployments",
                                protobuf.MEDIA_TYPE, body, protobuf.MEDIA_TYPE)
    assert (code, ctype) == (201, protobuf.MEDIA_TYPE)
    created = protobuf.decode(raw)
    assert created["spec"]["replicas"] == 0 and created["metadata"]["uid"]
    # the same object in JSON when JSON is acceptable too (kubectl's typed clients ask for both)
    code, ctype, raw = _request(sandbox, "GET", "/apis/apps/v1/namespaces/default/deployments/web",
                                f"{protobuf.MEDIA_TYPE}, application/json")
    assert (code, ctype) == (200, "application/json")
    as_json = json.loads(raw)
    assert as_json["spec"]["template"]["spec"]["volumes"] == \
        [{"name": "cfg", "configMap": {"name": "web-config", "defaultMode": 420}}]
    assert as_json["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": 1}
    # lists and errors in protobuf
    code, ctype, raw = _request(
        sandbox, "GET", "/apis/apps/v1/namespaces/default/deployments", protobuf.MEDIA_TYPE
    )
    listed = protobuf.decode(raw)
    assert (code, ctype, listed["kind"]) == (200, protobuf.MEDIA_TYPE, "DeploymentList")
    assert [d["metadata"]["name"] for d in listed["items"]] == ["web"]
    code, ctype, raw = _request(
        sandbox, "GET", "/api/v1/namespaces/default/configmaps/nope", protobuf.MEDIA_TYPE
    )
    status = protobuf.decode(raw)
    assert (code, ctype, status["kind"], status["reason"], status["code"]) == \
        (404, protobuf.MEDIA_TYPE, "Status", "NotFound", 404)
    # a malformed protobuf body is a bad request, never stored; a kind without a protobuf form is 415
    code, _, raw = _request(sandbox, "POST", "/api/v1/namespaces/default/configmaps", "application/json",
                            protobuf.MAGIC + b"\x0a\xff", protobuf.MEDIA_TYPE)
    assert (code, json.loads(raw)["reason"]) == (400, "BadRequest")
    code, _, raw = _request(sandbox, "POST", "/api/v1/namespaces/default/configmaps", "application/json",
                            _envelope("example.com/v1", "Widget", b""), protobuf.MEDIA_TYPE)
    assert (code, json.loads(raw)["reason"]) == (415, "UnsupportedMediaType")


def test_mutated_bodies_and_odd_objects_only_raise_protobuf_errors():
    """Whatever a client sends, decoding fails cleanly (never a 500), as does encoding an odd stored shape."""
    import random
    wire = protobuf.encode(DEPLOYMENT)
    rnd = random.Random(7)
    for _ in range(3000):
        body = bytearray(wire)
        for _ in range(rnd.randint(1, 3)):
            pos = rnd.randrange(len(body))
            if rnd.random() < 0.6:
                body[pos] = rnd.randrange(256)
            else:
                del body[pos:pos + rnd.randint(1, 12)]
        try:
            protobuf.decode(bytes(body))
        except protobuf.ProtobufError:
            pass
    invalid_utf8 = _envelope("v1", "ConfigMap", _field(1, _field(1, b"\xff\xfe")))
    with pytest.raises(protobuf.ProtobufError, match="UTF-8"):
        protobuf.decode(invalid_utf8)
    for odd in ({"spec": {"replicas": "many"}}, {"spec": {"selector": {"matchLabels": ["a"]}}},
                {"spec": {"template": {"spec": {"containers": {"name": "c"}}}}}):
        with pytest.raises(protobuf.ProtobufError):
            protobuf.encode({"apiVersion": "apps/v1", "kind": "Deployment", **odd})


def test_watch_streams_length_delimited_protobuf_to_protobuf_only_clients(sandbox: SandboxHandle):
    import kubernetes

    core = kubernetes.client.CoreV1Api(sandbox.api_client())
    core.create_namespaced_config_map("default", {"metadata": {"name": "first"}, "data": {"a": "b"}})
    path = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=2&allowWatchBookmarks=false"
    code, ctype, raw = _request(sandbox, "GET", path, protobuf.MEDIA_TYPE)
    assert (code, ctype) == (200, protobuf.WATCH_MEDIA_TYPE)
    events = protobuf.read_watch_frames(raw)
    names = [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in events]
    assert ("ADDED", "ConfigMap", "first") in names
    first = next(e["object"] for e in events if e["object"]["metadata"]["name"] == "first")
    assert first["data"] == {"a": "b"}
    # replay from a resourceVersion: the history's events, framed the same way
    code, _, raw = _request(
        sandbox,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1&timeoutSeconds=1",
        protobuf.MEDIA_TYPE,
    )
    replayed = [(e["type"], e["object"]["metadata"]["name"]) for e in protobuf.read_watch_frames(raw)]
    assert ("ADDED", "first") in replayed
    # JSON stays the answer for clients that accept it
    _, ctype, raw = _request(sandbox, "GET", path, f"{protobuf.MEDIA_TYPE}, application/json")
    assert ctype == "application/json" and b'"first"' in raw
