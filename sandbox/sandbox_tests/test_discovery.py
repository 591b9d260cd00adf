"""Aggregated discovery (apidiscovery.k8s.io/v2) says exactly what the legacy per-group documents say."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from ansible_operator_sandbox import discovery
from ansible_operator_sandbox.testing import SandboxHandle

from .helpers import install_crd

KUBECTL_ACCEPT = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
                  "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")


def _get(sandbox: SandboxHandle, path: str, accept: str = "application/json") -> tuple[str, Any]:
    req = urllib.request.Request(sandbox.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.headers["Content-Type"], json.loads(resp.read())


def _legacy(sandbox: SandboxHandle) -> set[tuple[Any, ...]]:
    out = set()
    paths = ["/api/v1"] + [f"/apis/{v['groupVersion']}" for g in _get(sandbox, "/apis")[1]["groups"]
                           for v in g["versions"]]
    for path in paths:
        for r in _get(sandbox, path)[1]["resources"]:
            gv = path.split("/", 2)[2]
            out.add((gv, r["name"], r["namespaced"], r.get("group"), r.get("version"), r["kind"],
                     tuple(r["verbs"]), tuple(r.get("shortNames", ())), tuple(r.get("categories", ()))))
    return out


def _aggregated(sandbox: SandboxHandle) -> set[tuple[Any, ...]]:
    out = set()
    for path in ("/api", "/apis"):
        ctype, doc = _get(sandbox, path, KUBECTL_ACCEPT)
        assert ctype == discovery.AGGREGATED and doc["kind"] == "APIGroupDiscoveryList"
        for item in doc["items"]:
            group = item["metadata"].get("name", "")
            for v in item["versions"]:
                gv = f"{group}/{v['version']}" if group else v["version"]
                for r in v["resources"]:
                    out.add(
                        (
                            gv,
                            r["resource"],
                            r["scope"] == "Namespaced",
                            None,
                            None,
                            r["responseKind"]["kind"],
                            tuple(r["verbs"]),
                            tuple(r.get("shortNames", ())),
                            tuple(r.get("categories", ())),
                        )
                    )
                    for s in r.get("subresources", []):
                        kind = s["responseKind"]
                        other = (kind["group"], kind["version"]) != (group, v["version"])
                        out.add(
                            (
                                gv,
                                f"{r['resource']}/{s['subresource']}",
                                r["scope"] == "Namespaced",
                                kind["group"] if other else None,
                                kind["version"] if other else None,
                                kind["kind"],
                                tuple(s["verbs"]),
                                (),
                                (),
                            )
                        )
    return out


def test_aggregated_discovery_matches_the_legacy_documents(sandbox: SandboxHandle):
    install_crd(sandbox.api_client())
    legacy, aggregated = _legacy(sandbox), _aggregated(sandbox)
    assert aggregated == legacy
    assert ("test.example.com/v1", "widgets", True, None, None, "Widget") in {x[:6] for x in aggregated}
    assert ("apps/v1", "deployments/scale", True, "autoscaling", "v1", "Scale") in {x[:6] for x in aggregated}
    # clients that do not ask for it get the legacy documents
    ctype, doc = _get(sandbox, "/apis")
    assert ctype == "application/json" and doc["kind"] == "APIGroupList"


def test_wants_aggregated():
    assert discovery.wants_aggregated(KUBECTL_ACCEPT)
    assert not discovery.wants_aggregated("application/json")
    assert not discovery.wants_aggregated(
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    )
