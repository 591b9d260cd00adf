"""Legacy (non-aggregated) discovery documents, computed from the live :class:`Registry`.

kubectl 1.32 asks for aggregated discovery (``as=APIGroupDiscoveryList``) but falls back to these when the
response is plain ``application/json``; the Python client and kopf only use these. Because they are built
per request, CRDs appear and disappear from discovery as soon as they are created or deleted.
"""

from __future__ import annotations

from typing import Any

from ansible_operator_sandbox.resources import Registry, ResourceType

#: the media type of aggregated discovery (apidiscovery.k8s.io/v2), which kubectl 1.32 asks for first
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

KUBE_MAJOR = "1"
KUBE_MINOR = "32"


def version() -> dict[str, str]:
    return {"major": KUBE_MAJOR, "minor": KUBE_MINOR, "gitVersion": f"v{KUBE_MAJOR}.{KUBE_MINOR}.0-sandbox",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
            "platform": "linux/amd64"}


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def _group_doc(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group_doc(g, vs) for g, vs in sorted(registry.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.groups().get(name)
    if not name or not versions:
        return None
    return dict(_group_doc(name, versions), kind="APIGroup", apiVersion="v1")


def _subresource(t: ResourceType, sub: str) -> tuple[tuple[str, str, str], list[str]]:
    """(group, version, kind) a subresource answers with, and its verbs."""
    if sub == "scale":
        return ("autoscaling", "v1", "Scale"), ["get", "patch", "update"]
    if sub == "finalize":
        return (t.group, t.version, t.kind), ["update"]
    if sub == "token":  # TokenRequest (sandbox/auth.py)
        return ("authentication.k8s.io", "v1", "TokenRequest"), ["create"]
    if sub == "eviction":  # pods/eviction (Api.evict)
        return ("policy", "v1", "Eviction"), ["create"]
    return (t.group, t.version, t.kind), ["get", "patch", "update"]


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for t in types:
        entry: dict[str, Any] = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                                 "kind": t.kind, "verbs": list(t.verbs)}
        if t.short_names:
            entry["shortNames"] = list(t.short_names)
        if t.categories:
            entry["categories"] = list(t.categories)
        resources.append(entry)
        for sub in t.subresources:
            s: dict[str, Any] = {"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced}
            gvk, verbs = _subresource(t, sub)
            if gvk != (t.group, t.version, t.kind):
                s.update(group=gvk[0], version=gvk[1])
            s.update(kind=gvk[2], verbs=verbs)
            resources.append(s)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def root_paths(registry: Registry) -> list[str]:
    paths = [
        "/api",
        "/api/v1",
        "/apis",
        "/healthz",
        "/livez",
        "/openapi/v2",
        "/openapi/v3",
        "/readyz",
        "/version",
    ]
    for g, vs in registry.groups().items():
        if g:
            paths.append(f"/apis/{g}")
            paths.extend(f"/apis/{g}/{v}" for v in vs)
    return sorted(paths)


def wants_aggregated(accept: str) -> bool:
    """Whether an Accept header asks for apidiscovery.k8s.io/v2 APIGroupDiscoveryList in JSON."""
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        params = dict(f.partition("=")[::2] for f in fields[1:])
        if fields[0] in ("application/json", "*/*") and params.get("g") == "apidiscovery.k8s.io" and \
                params.get("v") == "v2" and params.get("as") == "APIGroupDiscoveryList":
            return True
    return False


def _gvk(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _resource_discovery(t: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {"resource": t.plural, "responseKind": _gvk(t.group, t.version, t.kind),
                             "scope": "Namespaced" if t.namespaced else "Cluster",
                             "singularResource": t.singular, "verbs": list(t.verbs)}
    if t.short_names:
        entry["shortNames"] = list(t.short_names)
    if t.categories:
        entry["categories"] = list(t.categories)
    subs = []
    for sub in t.subresources:
        gvk, verbs = _subresource(t, sub)
        subs.append({"subresource": sub, "responseKind": _gvk(*gvk), "verbs": verbs})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(registry: Registry, legacy: bool) -> dict[str, Any]:
    """``/api`` (``legacy``: the core group) or ``/apis`` as an APIGroupDiscoveryList: every group, version
    and
    resource in one document, preferred version first (what ``/apis/<group>/<version>`` list one by one)."""
    items = []
    for name, versions in sorted(registry.groups().items()):
        if bool(name) == legacy:
            continue
        vs = [
            {
                "version": v,
                "resources": [_resource_discovery(t) for t in registry.in_group_version(name, v)],
                "freshness": "Current",
            }
            for v in versions
        ]
        items.append({"metadata": {"name": name, "creationTimestamp": None} if name else
                      {"creationTimestamp": None}, "versions": vs})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": items}
