"""Whatever a client sends, the answer is a Status with a 4xx code (never a 500) and the server keeps
serving."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request

from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import CRD

PATHS = [
    "/api/v1/namespaces/default/configmaps",
    "/api/v1/namespaces/default/configmaps/x",
    "/api/v1/namespaces/default/configmaps/x/status",
    "/api/v1/namespaces",
    "/api/v1/namespaces/default",
    "/api/v1/namespaces/default/finalize",
    "/apis/apps/v1/namespaces/default/deployments/d",
    "/apis/apps/v1/namespaces/default/deployments/d/scale",
    "/apis/apps/v1/namespaces/default/deployments",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/test.example.com/v1/namespaces/default/widgets",
    "/apis/test.example.com/v1/namespaces/default/widgets/w",
    "/apis/test.example.com/v1/namespaces/default/widgets/w/status",
    "/api/v1/watch/namespaces/default/configmaps",
    "/apis/nope/v1/x",
    "/api/v2/pods",
    "/openapi/v3/apis/apps/v1",
    "/api/v1/namespaces/default/configmaps/x/y/z",
]
BODIES = [
    b"",
    b"{",
    b"[]",
    b"null",
    b"42",
    b'"s"',
    b"{}",
    b'{"metadata": 1}',
    b'{"metadata": {"name": 5}}',
    b'{"metadata": {"name": "x", "labels": {"a": 1}}}',
    b'{"metadata": {"name": "x"}, "spec": "nope"}',
    b'{"metadata": {"name": "d"}, "spec": {"selector": 3}}',
    b'[{"op": "nope"}]',
    b'[{"op": "add"}]',
    b'{"apiVersion": 3, "kind": [], "metadata": {"name": "x"}}',
    b'{"spec": {"replicas": "many"}}',
    b'{"metadata": {"name": "x", "ownerReferences": "no", "finalizers": {"a": 1}}}',
    b'{"metadata": {"name": "w"}, "spec": {"size": {"deep": [1, 2, {"x": null}]}}}',
    b'{"preconditions": "x", "propagationPolicy": 7}',
    b"\xff\xfe\x00garbage",
    b"- a\n- b: [\n",
    b"[" * 5000 + b"]" * 5000,
    b'{"metadata": {"name": "x", "generateName": 1}}',
    b'{"spec": {"replicas": 3}}',
    b'[{"op": "replace", "path": "/spec/replicas", "value": "x"}]',
    b'[{"op": "test", "path": "/spec/replicas", "value": 99}]',
    b'{"spec": {"size": 2}, "status": {"phase": 1}}',
    b'{"metadata": {"name": "w", "finalizers": ["a/b"]}, "spec": {"size": 1}, "status": 5}',
]
CONTENT_TYPES = ["application/json", "application/merge-patch+json", "application/json-patch+json",
                 "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain",
                 "application/vnd.kubernetes.protobuf", "application/yaml"]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
QUERIES = [
    "",
    "?watch=true&timeoutSeconds=1",
    "?labelSelector=a%20in%20(",
    "?fieldSelector=x",
    "?dryRun=Nope",
    "?resourceVersion=abc&watch=1&timeoutSeconds=1",
    "?fieldManager=m&fieldValidation=Strict",
    "?propagationPolicy=Sideways",
    "?fieldValidation=Loud",
    "?timeoutSeconds=x&watch=true",
    "?limit=x",
    "?limit=1&continue=%40%40",
    "?limit=2&continue=eyJ9",
    "?continue=bnVsbA==",
]


def _request(url: str, method: str, body: bytes, ctype: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body if method != "GET" else None, method=method,
                                 headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_random_requests_never_500(sandbox: SandboxHandle):
    rng = random.Random(1234)
    _request(sandbox.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST",
             json.dumps(CRD).encode(), "application/json")
    _request(sandbox.url + "/api/v1/namespaces/default/configmaps", "POST",
             b'{"metadata": {"name": "x"}}', "application/json")
    _request(
        sandbox.url + "/apis/apps/v1/namespaces/default/deployments",
        "POST",
        json.dumps(
            {
                "metadata": {"name": "d"},
                "spec": {
                    "selector": {"matchLabels": {"a": "b"}},
                    "template": {
                        "metadata": {"labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "i"}]},
                    },
                },
            }
        ).encode(),
        "application/json",
    )
    _request(
        sandbox.url + "/apis/test.example.com/v1/namespaces/default/widgets",
        "POST",
        b'{"apiVersion": "test.example.com/v1", "kind": "Widget", "metadata": {"name": "w"},'
        b' "spec": {"size": 1}}',
        "application/json",
    )
    seen = set()
    for _ in range(400):
        method = rng.choice(METHODS)
        url = sandbox.url + rng.choice(PATHS) + rng.choice(QUERIES)
        if "watch" in url and "timeoutSeconds" not in url:  # a watch streams until its timeout
            url += ("&" if "?" in url else "?") + "timeoutSeconds=1"
        status, body = _request(url, method, rng.choice(BODIES), rng.choice(CONTENT_TYPES))
        seen.add(status)
        assert status < 500, (method, url, status, body[:300])
        if status == 404 and body == b"404 page not found\n":  # a group nobody serves, as the real mux
            continue
        if status >= 400:
            doc = json.loads(body)
            assert doc["kind"] == "Status" and doc["code"] == status and doc["status"] == "Failure"
    assert {400, 404}.issubset(seen)
    status, _ = _request(sandbox.url + "/version", "GET", b"", "application/json")
    assert status == 200


def test_malformed_crds_are_rejected_not_crashing(sandbox: SandboxHandle):
    import copy
    url = sandbox.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    mutations: list[tuple[tuple, object]] = [
        (("names", "shortNames"), 5),
        (("versions", 0, "subresources", "status"), "yes"),
        (("versions", 0, "additionalPrinterColumns"), [None]),
        (("versions", 0, "schema", "openAPIV3Schema"), "object"),
        (("versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties"), [1]),
        (("versions", 0, "served"), "yes"),
        (("versions",), [None]),
    ]
    for path, value in mutations:
        crd = copy.deepcopy(CRD)
        target = crd["spec"]
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
        status, body = _request(url, "POST", json.dumps(crd).encode(), "application/json")
        assert status in (400, 422), (path, status, body[:300])
    status, _ = _request(url, "POST", json.dumps(CRD).encode(), "application/json")
    assert status == 201


def test_hostile_yaml_is_refused_before_it_is_built(sandbox: SandboxHandle):
    """A "billion laughs" (nine levels of ten aliases: 10^9 nodes once expanded) and deep flow nesting are
    refused with a 400 from the YAML event stream; building and walking them took minutes (aliases) or
    seconds (5,000 nested brackets, the pure-Python loader). The server answers the next request."""
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for prev, name in zip("abcdefgh", "bcdefghi"):
        laughs += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]\n"
    url = sandbox.url + "/api/v1/namespaces/default/configmaps/x?fieldManager=m"
    for body, message in ((laughs.encode(), "excessive aliasing"),
                          (b"[" * 5000 + b"]" * 5000, "exceeded max depth")):
        status, answer = _request(url, "PATCH", body, "application/apply-patch+yaml")
        doc = json.loads(answer)
        assert (status, doc["code"], doc["reason"]) == (400, 400, "BadRequest")
        assert message in doc["message"]
    # aliases that expand to a small document are YAML like any other
    status, answer = _request(url, "PATCH", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
                                            b"data: &d {k: v}\n", "application/apply-patch+yaml")
    assert status == 201, answer[:300]
    assert json.loads(answer)["data"] == {"k": "v"}
