"""Request bodies without a Content-Type header (the kubernetes client 37 sends create/replace/delete bodies
so): kube-apiserver decodes them as JSON (k8s.io/apiserver negotiation.NegotiateInputSerializerForMediaType
takes its first serializer's media type for an empty header); a PATCH without one is 415, in the words
kube-apiserver 1.36 uses (compared against one: go-restful's for built-in kinds, handlers/patch.go's for
custom resources)."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import install_crd

CM = "/api/v1/namespaces/default/configmaps"


def _send(sandbox: SandboxHandle, method: str, path: str, body: Any = None,
          content_type: str | None = None) -> tuple[int, dict[str, Any]]:
    """One request with exactly the headers given: http.client adds Host, Accept-Encoding and
    Content-Length, never a Content-Type (urllib.request would add application/x-www-form-urlencoded)."""
    url = urlsplit(sandbox.url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10)
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    data = None if body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _configmap(sandbox: SandboxHandle, name: str = "cm") -> dict[str, Any]:
    code, obj = _send(sandbox, "POST", CM, {"metadata": {"name": name}, "data": {"k": "v"}})
    assert code == 201, obj
    return obj


@pytest.mark.parametrize("content_type", [None, ""], ids=["absent", "empty"])
def test_create_without_content_type_is_json(sandbox, content_type):
    code, obj = _send(sandbox, "POST", CM, {"metadata": {"name": "cm"}, "data": {"k": "v"}}, content_type)
    assert code == 201, obj
    assert obj["kind"] == "ConfigMap" and obj["data"] == {"k": "v"}


def test_replace_and_status_without_content_type(sandbox):
    cm = _configmap(sandbox)
    cm["data"] = {"k": "w"}
    code, obj = _send(sandbox, "PUT", f"{CM}/cm", cm)
    assert code == 200 and obj["data"] == {"k": "w"}, obj
    code, ns = _send(sandbox, "GET", "/api/v1/namespaces/default")
    assert code == 200
    code, obj = _send(sandbox, "PUT", "/api/v1/namespaces/default/status", ns)  # a subresource
    assert code == 200 and obj["kind"] == "Namespace", obj


def test_delete_options_without_content_type(sandbox):
    _configmap(sandbox)
    code, obj = _send(sandbox, "DELETE", f"{CM}/cm", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                      "dryRun": ["All"]})
    assert code == 200, obj
    code, _ = _send(sandbox, "GET", f"{CM}/cm")
    assert code == 200  # the body was read: a dry run deleted nothing
    code, obj = _send(sandbox, "DELETE", CM, {"kind": "DeleteOptions", "apiVersion": "v1",
                                              "propagationPolicy": "Background"})
    assert code == 200 and "cm" in [i["metadata"]["name"] for i in obj["items"]], obj
    code, _ = _send(sandbox, "GET", f"{CM}/cm")
    assert code == 404


def test_create_subresource_without_content_type(sandbox):
    code, obj = _send(sandbox, "POST", "/api/v1/namespaces/default/serviceaccounts",
                      {"metadata": {"name": "sa"}})
    assert code == 201, obj
    code, obj = _send(sandbox, "POST", "/api/v1/namespaces/default/serviceaccounts/sa/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 3600}})
    assert code == 201 and obj["kind"] == "TokenRequest" and obj["status"]["token"], obj
    assert obj["spec"]["expirationSeconds"] == 3600


def _deployment(sandbox: SandboxHandle) -> None:
    code, obj = _send(sandbox, "POST", "/apis/apps/v1/namespaces/default/deployments", {
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    assert code == 201, obj


# A built-in kind's PATCH route (go-restful) takes only the patch types: anything else, none included, is
# refused before the handler with go-restful's message and an empty `details` (kube-apiserver 1.36).
ROUTE_415 = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": "415: Unsupported Media Type", "reason": "UnsupportedMediaType", "details": {},
             "code": 415}


@pytest.mark.parametrize("content_type", [None, "", "application/json", "application/apply-patch+cbor"])
@pytest.mark.parametrize("path", [f"{CM}/cm", "/apis/apps/v1/namespaces/default/deployments/web/scale",
                                  f"{CM}/missing"], ids=["object", "scale", "missing"])
def test_builtin_patch_without_a_patch_type_is_415(sandbox, path, content_type):
    _configmap(sandbox)
    _deployment(sandbox)
    answer = _send(sandbox, "PATCH", path, {"metadata": {"labels": {"a": "b"}}}, content_type)
    assert answer == (415, ROUTE_415)


@pytest.mark.parametrize("content_type", [None, "application/json", "application/strategic-merge-patch+json",
                                          "application/apply-patch+cbor"])
@pytest.mark.parametrize("sub", ["", "/status"])
def test_custom_resource_patch_without_a_patch_type_is_415(sandbox, content_type, sub):
    api = sandbox.api_client()
    try:
        install_crd(api)
    finally:
        api.close()
    widgets = "/apis/test.example.com/v1/namespaces/default/widgets"
    code, obj = _send(sandbox, "POST", widgets, {"apiVersion": "test.example.com/v1", "kind": "Widget",
                                                 "metadata": {"name": "w"}, "spec": {"size": 1}})
    assert code == 201, obj
    code, status = _send(sandbox, "PATCH", f"{widgets}/w{sub}", {"metadata": {"labels": {"a": "b"}}},
                         content_type)
    # k8s.io/apiserver handlers/patch.go: the types a custom resource takes, no details
    assert (code, status) == (415, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
                   "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        "reason": "UnsupportedMediaType", "code": 415})


@pytest.mark.parametrize("content_type", ["text/plain", "application/cbor"])
def test_undecodable_body_is_still_415(sandbox, content_type):
    assert _send(sandbox, "POST", CM, {"metadata": {"name": "cm"}}, content_type) == (415, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
                   "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        "reason": "UnsupportedMediaType", "code": 415})
