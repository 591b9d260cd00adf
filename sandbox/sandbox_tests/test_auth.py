"""Pure logic of the secure sandbox (sandbox/auth.py): request attributes as apiserver's RequestInfoFactory
derives them, RBAC rule matching as rbac.RuleAllows, subjects as appliesToUser, and the 403 wording."""

from __future__ import annotations

import pytest

from ansible_operator_sandbox.auth import (
    ANONYMOUS_USER,
    Attributes,
    UserInfo,
    _applies_to,
    forbidden,
    request_attributes,
    rule_allows,
)

SA = UserInfo("system:serviceaccount:ns:bot", ("system:serviceaccounts", "system:authenticated"))


@pytest.mark.parametrize(
    "method,path,query,want",
    [
        ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "ns", "", "pods", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "ns", "", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/ns/pods/p", {}, ("watch", "ns", "", "pods", "", "p")),
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            {"fieldSelector": "metadata.name=p"},
            ("list", "ns", "", "pods", "", "p"),
        ),
        ("PUT", "/api/v1/namespaces/ns/pods/p/status", {}, ("update", "ns", "", "pods", "status", "p")),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            {},
            ("patch", "ns", "apps", "deployments", "scale", "d"),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/configmaps",
            {},
            ("deletecollection", "ns", "", "configmaps", "", ""),
        ),
        ("DELETE", "/api/v1/namespaces/ns/configmaps/c", {}, ("delete", "ns", "", "configmaps", "", "c")),
        (
            "POST",
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
            {},
            ("create", "ns", "", "serviceaccounts", "token", "sa"),
        ),
        # a namespace is its own namespace; its finalize/status are subresources
        ("GET", "/api/v1/namespaces/ns", {}, ("get", "ns", "", "namespaces", "", "ns")),
        ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "ns", "", "namespaces", "finalize", "ns")),
        (
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {},
            ("list", "", "rbac.authorization.k8s.io", "clusterroles", "", ""),
        ),
    ],
)
def test_resource_request_attributes(
    method: str, path: str, query: dict[str, str], want: tuple[str, ...]
) -> None:
    a = request_attributes(SA, method, path, query)
    assert a.resource_request
    assert (a.verb, a.namespace, a.api_group, a.resource, a.subresource, a.name) == want


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api",
        "/apis",
        "/apis/apps",
        "/api/v1",
        "/apis/apps/v1",
        "/healthz",
        "/openapi/v3/apis/apps/v1",
        "/version",
    ],
)
def test_non_resource_requests(path: str) -> None:
    a = request_attributes(SA, "GET", path, {})
    assert not a.resource_request and a.verb == "get" and a.path == path


def _res(verb: str, resource: str, sub: str = "", name: str = "", group: str = "") -> Attributes:
    return Attributes(
        SA, verb, True, namespace="ns", api_group=group, resource=resource, subresource=sub, name=name
    )


@pytest.mark.parametrize(
    "rule,attrs,allowed",
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, _res("get", "pods"), True),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, _res("list", "pods"), False),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}, _res("get", "pods", "status"), False),
        (
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]},
            _res("get", "pods", "status"),
            True,
        ),
        (
            {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["*"]},
            _res("patch", "deployments", "scale", group="apps"),
            True,
        ),
        (
            {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["*"]},
            _res("patch", "deployments", group="apps"),
            False,
        ),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, _res("delete", "x", group="y"), True),
        (
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]},
            _res("get", "configmaps", name="a"),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]},
            _res("get", "configmaps", name="b"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["list"]},
            _res("list", "configmaps"),
            False,
        ),
        (
            {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
            Attributes(SA, "get", False, path="/apis/apps"),
            True,
        ),
        (
            {"nonResourceURLs": ["/apis/*"], "verbs": ["get"]},
            Attributes(SA, "get", False, path="/api"),
            False,
        ),
        ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, _res("get", "healthz"), False),
    ],
)
def test_rule_allows(rule: dict[str, list[str]], attrs: Attributes, allowed: bool) -> None:
    assert rule_allows(attrs, rule) is allowed


def test_subjects() -> None:
    assert _applies_to(SA, {"kind": "ServiceAccount", "name": "bot"}, "ns")  # RoleBinding's namespace
    assert not _applies_to(SA, {"kind": "ServiceAccount", "name": "bot"}, "")  # ClusterRoleBinding needs one
    assert _applies_to(SA, {"kind": "ServiceAccount", "name": "bot", "namespace": "ns"}, "")
    assert _applies_to(SA, {"kind": "Group", "name": "system:serviceaccounts"}, "")
    assert not _applies_to(SA, {"kind": "User", "name": "bot"}, "ns")
    assert _applies_to(ANONYMOUS_USER, {"kind": "Group", "name": "system:unauthenticated"}, "")


def test_forbidden_wording() -> None:
    e = forbidden(_res("get", "deployments", "scale", name="d", group="apps"))
    assert e.code == 403 and e.reason == "Forbidden"
    assert e.message == (
        'deployments.apps "d" is forbidden: User "system:serviceaccount:ns:bot" cannot get '
        'resource "deployments/scale" in API group "apps" in the namespace "ns"'
    )
    assert e.status()["details"] == {"name": "d", "group": "apps", "kind": "deployments"}
    cluster = forbidden(Attributes(SA, "list", True, resource="nodes"), 'RBAC: role "x" not found')
    assert cluster.message == (
        'nodes is forbidden: User "system:serviceaccount:ns:bot" cannot list resource '
        '"nodes" in API group "" at the cluster scope: RBAC: role "x" not found'
    )
    path = forbidden(Attributes(ANONYMOUS_USER, "get", False, path="/apis"))
    assert path.message == 'forbidden: User "system:anonymous" cannot get path "/apis"'
    assert path.status()["details"] == {}
