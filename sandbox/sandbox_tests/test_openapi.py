"""Published OpenAPI v2/v3 documents (built-in schemas from the upstream spec, CRD schemas) and built-in
pruning."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from ansible_operator_sandbox import builtin_schemas, protobuf
from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import install_crd


def _call(sandbox: SandboxHandle, method: str, path: str, body: Any = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sandbox.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _dangling_refs(doc: dict[str, Any], prefix: str, defs: dict[str, Any]) -> list[str]:
    refs: list[str] = []
    stack: list[Any] = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                refs.append(item["$ref"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return [r for r in refs if not r.startswith(prefix) or r[len(prefix):] not in defs]


def _with_gvk(schemas: dict[str, Any], group: str, version: str, kind: str) -> dict[str, Any]:
    found = [
        s
        for s in schemas.values()
        if {"group": group, "version": version, "kind": kind}
        in (s.get("x-kubernetes-group-version-kind") or [])
    ]
    assert len(found) == 1, f"{group}/{version} {kind}: {len(found)} schemas"
    return found[0]


def test_pruning_walks_the_upstream_definitions():
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "bogus": 1},
           "spec": {"replicas": 1, "extra": True, "strategy": {"rollingUpdate": {"maxSurge": "25%"}},
                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
                        {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}, "typo": 1}]}}}}
    pruned, walk = builtin_schemas.prune("apps", "v1", "Deployment", obj)
    assert walk.unknown == ["metadata.bogus", "spec.extra", "spec.template.spec.containers[0].typo"]
    assert walk.type_error is None
    assert pruned["spec"]["template"]["spec"]["containers"] == [
        {"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]
    assert "extra" in obj["spec"]  # the input is not modified
    assert builtin_schemas.prune("example.com", "v1", "Thing", obj)[0] is obj


@pytest.mark.parametrize(
    "kind, obj, message",
    [
        (
            "Deployment",
            {"spec": {"replicas": "3"}},
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32",
        ),
        (
            "Deployment",
            {"spec": {"replicas": 1.5}},
            "json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas"
            " of type int32",
        ),
        # an integer field takes an integer literal that fits its Go type; the message quotes the number
        (
            "Deployment",
            {"spec": {"replicas": 2**31}},
            "json: cannot unmarshal number 2147483648 into Go struct field DeploymentSpec.spec.replicas"
            " of type int32",
        ),
        (
            "Deployment",
            {"spec": {"replicas": 2.0}},
            "json: cannot unmarshal number 2.0 into Go struct field DeploymentSpec.spec.replicas"
            " of type int32",
        ),
        (
            "Deployment",
            {"metadata": {"generation": 2**63}},
            "json: cannot unmarshal number 9223372036854775808 into Go struct field"
            " ObjectMeta.metadata.generation of type int64",
        ),
        # IntOrString decodes a non-string into its int32 (and its error names that type)
        (
            "Deployment",
            {"spec": {"strategy": {"rollingUpdate": {"maxSurge": True}}}},
            "json: cannot unmarshal bool into Go struct field"
            " RollingUpdateDeployment.spec.strategy.rollingUpdate.maxSurge of type int32",
        ),
        (
            "Deployment",
            {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": 5}]}}}},
            (
                "json: cannot unmarshal number into Go struct field"
                " Container.spec.template.spec.containers.image of type string"
            ),
        ),
        (
            "Deployment",
            {"spec": {"template": {"spec": {"containers": {"name": "c"}}}}},
            (
                "json: cannot unmarshal object into Go struct field"
                " PodSpec.spec.template.spec.containers of type []v1.Container"
            ),
        ),
        (
            "Deployment",
            {"metadata": {"labels": {"a": 1}}},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        (
            "Deployment",
            {"spec": {"selector": "app=web"}},
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.selector"
            " of type v1.LabelSelector",
        ),
        (
            "Deployment",
            {"spec": {"paused": "yes"}},
            "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.paused of type bool",
        ),
        # Quantity and IntOrString take strings and numbers; null leaves a field unset
        (
            "Deployment",
            {
                "spec": {
                    "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                    "template": {
                        "spec": {"containers": [{"resources": {"limits": {"cpu": 1}}}], "nodeSelector": None}
                    },
                }
            },
            None,
        ),
    ],
)
def test_type_errors_as_the_go_decoder_reports_them(kind: str, obj: dict[str, Any], message: str | None):
    assert builtin_schemas.prune("apps", "v1", kind, obj)[1].type_error == message


def test_v3_documents_publish_builtin_and_crd_schemas(sandbox: SandboxHandle):
    code, _, root = _call(sandbox, "GET", "/openapi/v3")
    assert code == 200 and "apis/apps/v1" in root["paths"] and "api/v1" in root["paths"]
    code, _, apps = _call(sandbox, "GET", root["paths"]["apis/apps/v1"]["serverRelativeURL"])
    schemas = apps["components"]["schemas"]
    deployment = _with_gvk(schemas, "apps", "v1", "Deployment")
    spec_ref = deployment["properties"]["spec"]["$ref"]
    spec = schemas[spec_ref.rsplit("/", 1)[1]]
    assert "Number of desired pods" in spec["properties"]["replicas"]["description"]
    assert _dangling_refs(apps, "#/components/schemas/", schemas) == []
    patch = apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    # a CRD's schema is published in its group's document, and the root's hash moves with it
    old_hash = root["paths"].get("apis/test.example.com/v1")
    install_crd(sandbox.api_client())
    _, _, root = _call(sandbox, "GET", "/openapi/v3")
    assert old_hash is None and "apis/test.example.com/v1" in root["paths"]
    _, _, doc = _call(sandbox, "GET", root["paths"]["apis/test.example.com/v1"]["serverRelativeURL"])
    widget = _with_gvk(doc["components"]["schemas"], "test.example.com", "v1", "Widget")
    assert widget["properties"]["spec"]["required"] == ["size"]
    # as apiextensions publishes it: no strategic merge patch for a custom resource (kubectl merge-patches)
    widget_patch = doc["paths"]["/apis/test.example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert sorted(widget_patch["requestBody"]["content"]) == [
        "application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"]
    assert _dangling_refs(doc, "#/components/schemas/", doc["components"]["schemas"]) == []


def test_v2_document_and_its_protobuf_only_request(sandbox: SandboxHandle):
    install_crd(sandbox.api_client())
    code, _, v2 = _call(sandbox, "GET", "/openapi/v2")
    assert code == 200 and v2["swagger"] == "2.0"
    _with_gvk(v2["definitions"], "", "v1", "ConfigMap")
    _with_gvk(v2["definitions"], "test.example.com", "v1", "Widget")
    assert _dangling_refs(v2, "#/definitions/", v2["definitions"]) == []
    # client-go's OpenAPISchema() asks for gnostic's protobuf form
    req = urllib.request.Request(sandbox.url + "/openapi/v2", headers={
        "Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        ctype, raw = resp.headers["Content-Type"], resp.read()
    assert ctype == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    doc: Any = protobuf.message_class("openapi.v2.Document").FromString(raw)  # a generated class
    definitions = {d.name: d.value for d in doc.definitions.additional_properties}
    assert set(definitions) == set(v2["definitions"])
    deployment = definitions["io.k8s.api.apps.v1.Deployment"]
    gvk = {e.name: yaml.safe_load(e.value.yaml) for e in deployment.vendor_extension}
    assert gvk["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "kind": "Deployment", "version": "v1"}
    ]
    spec = {
        p.name: p.value
        for p in definitions["io.k8s.api.apps.v1.DeploymentSpec"].properties.additional_properties
    }
    assert spec["replicas"].type.value == ["integer"] and spec["replicas"].format == "int32"
    assert spec["template"]._ref == "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"
    assert len(doc.paths.path) == len(v2["paths"])


CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c"},
    "data": {"a": "b"},
    "bogus": {"x": 1},
}


@pytest.mark.parametrize("validation, code, warning", [
    ("Strict", 400, None), ("Warn", 201, '299 - "unknown field \\"bogus\\""'),
    ("", 201, '299 - "unknown field \\"bogus\\""'), ("Ignore", 201, None)])
def test_builtin_unknown_fields_per_field_validation(sandbox: SandboxHandle, validation: str, code: int,
                                                     warning: str | None):
    query = f"?fieldValidation={validation}" if validation else ""
    got, headers, body = _call(sandbox, "POST", f"/api/v1/namespaces/default/configmaps{query}", CM)
    assert got == code
    assert headers.get("Warning") == warning
    if code == 400:
        assert body["message"] == (
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding '
            'error: unknown field "bogus"'
        )
        assert _call(sandbox, "GET", "/api/v1/namespaces/default/configmaps/c")[0] == 404
    else:
        assert "bogus" not in body and body["data"] == {"a": "b"}


def test_builtin_type_errors_are_bad_requests(sandbox: SandboxHandle):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"replicas": "two", "selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    code, _, body = _call(sandbox, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot '
        "unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
    )


def test_builtin_status_writes_are_decoded_into_the_go_type_too(sandbox: SandboxHandle):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    path = "/apis/apps/v1/namespaces/default/deployments"
    code, _, created = _call(sandbox, "POST", path, deployment)
    assert code == 201
    bad = dict(created, status={"replicas": "two"})
    code, _, body = _call(sandbox, "PUT", f"{path}/d/status", bad)
    assert (code, body["message"]) == (400, 'Deployment in version "v1" cannot be handled as a Deployment: '
                                            "json: cannot unmarshal string into Go struct field "
                                            "DeploymentStatus.status.replicas of type int32")
    code, _, body = _call(sandbox, "PUT", f"{path}/d/status?fieldValidation=Strict",
                          dict(created, status={"replicas": 2, "typo": 1}))
    assert (code, body["message"]) == (400, 'Deployment in version "v1" cannot be handled as a Deployment: '
                                            'strict decoding error: unknown field "status.typo"')
    for _ in range(5):  # the sandbox's deployment controller may write the status in between: re-read
        code, _, current = _call(sandbox, "GET", f"{path}/d")
        code, _, body = _call(sandbox, "PUT", f"{path}/d/status", dict(current, status={"replicas": 2}))
        if code != 409:
            break
    assert code == 200 and body["status"]["replicas"] == 2


def test_every_served_builtin_kind_has_a_schema_and_a_protobuf_message():
    """A kind added to the registry without regenerating the artifacts (scripts/gen_k8s_*.py) fails here."""
    from ansible_operator_sandbox import protobuf
    from ansible_operator_sandbox.resources import Registry

    registry = Registry()
    missing = []
    for group, versions in registry.groups().items():
        for version in versions:
            for t in registry.in_group_version(group, version):
                if t.builtin and (
                    builtin_schemas.definition_name(group, version, t.kind) is None
                    or protobuf.message_type(t.api_version, t.kind) is None
                    or ("list" in t.verbs and protobuf.message_type(t.api_version, t.list_kind) is None)
                ):
                    missing.append(f"{t.api_version} {t.kind}")
    assert missing == []
