"""Legacy (non-aggregated) discovery documents, computed from the live :class:`Registry`.

kubectl 1.32 asks for aggregated discovery (``as=APIGroupDiscoveryList``) but falls back to these when the
response is plain ``application/json``; the Python client and kopf only use these. Because they are built
per request, CRDs appear and disappear from discovery as soon as they are created or deleted.
"""

from __future__ import annotations

from typing import Any

from ansible_operator.sandbox.resources import Registry

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
            s: dict[str, Any] = {"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced,
                                 "kind": t.kind, "verbs": ["get", "patch", "update"]}
            if sub == "scale":
                s.update(kind="Scale", group="autoscaling", version="v1")
            if sub == "finalize":
                s["verbs"] = ["update"]
            if sub == "token":  # TokenRequest (sandbox/auth.py)
                s.update(kind="TokenRequest", group="authentication.k8s.io", version="v1", verbs=["create"])
            resources.append(s)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def root_paths(registry: Registry) -> list[str]:
    paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]
    for g, vs in registry.groups().items():
        if g:
            paths.append(f"/apis/{g}")
            paths.extend(f"/apis/{g}/{v}" for v in vs)
    return sorted(paths)
