"""The member Lease's API calls (KubeLeaseStore) against a recording fake of Kube.request_once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ansible_operator.kube import Conflict, NotFound
from ansible_operator.sharding.leases import KubeLeaseStore, LeaseLost, dns_name, lease_name
from ansible_operator.sharding.membership import DRAINED_ANNOTATION, RING_LABEL

BASE = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"


class FakeKube:
    """Leases by name, with resourceVersions and optimistic concurrency, as the API server keeps them."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.rv = 0

    def _stamp(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        lease = copy.deepcopy(lease)
        lease["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[lease["metadata"]["name"]] = lease
        return copy.deepcopy(lease)

    def request_once(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                     query: list[tuple[str, str]] | None = None, **options: Any) -> Any:
        self.calls.append((method, path, query))
        name = path[len(BASE) + 1:] if path != BASE else None
        current = self.leases.get(name or "")
        if method == "GET" and name is None:
            selector = dict(query or [])["labelSelector"]
            label, _sep, value = selector.partition("=")
            return {"items": [copy.deepcopy(x) for x in self.leases.values()
                              if x["metadata"].get("labels", {}).get(label) == value]}
        if method == "GET":
            if current is None:
                raise NotFound(404, "NotFound", name or "")
            return copy.deepcopy(current)
        if method == "POST":
            if body["metadata"]["name"] in self.leases:
                raise Conflict(409, "AlreadyExists", "exists")
            return self._stamp(body)
        if method == "PUT":
            if current is None:
                raise NotFound(404, "NotFound", name or "")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "modified")
            return self._stamp(body)
        if method == "DELETE":
            if current is None:
                raise NotFound(404, "NotFound", name or "")
            wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "precondition")
            del self.leases[name or ""]
            return {}
        raise AssertionError(method)


def store(kube: FakeKube, identity: str = "pod-1_1") -> KubeLeaseStore:
    return KubeLeaseStore(kube, namespace="ops", ring="widgets", identity=identity,  # type: ignore[arg-type]
                          lease_duration=15)


async def test_renew_creates_then_replaces_our_lease_with_the_drained_annotation() -> None:
    kube = FakeKube()
    s = store(kube)
    await s.renew(None, 2)
    lease = kube.leases[s.name]
    assert lease["metadata"]["labels"] == {RING_LABEL: "widgets"}
    assert lease["spec"]["holderIdentity"] == "pod-1_1" and lease["spec"]["leaseDurationSeconds"] == 15
    assert DRAINED_ANNOTATION not in lease["metadata"].get("annotations", {})
    await s.renew("v1", 2)
    assert kube.leases[s.name]["metadata"]["annotations"][DRAINED_ANNOTATION] == "v1"
    assert [c[0] for c in kube.calls] == ["POST", "PUT"]  # a renewal is one request


async def test_a_conflict_is_read_again_and_a_deleted_lease_is_lost() -> None:
    kube = FakeKube()
    s = store(kube)
    await s.renew(None, 2)
    kube.leases[s.name]["metadata"]["labels"]["extra"] = "x"
    kube._stamp(kube.leases[s.name])  # someone else wrote it
    await s.renew("v2", 2)
    assert kube.leases[s.name]["metadata"]["labels"]["extra"] == "x"
    del kube.leases[s.name]
    with pytest.raises(LeaseLost):
        await s.renew("v2", 2)


async def test_listing_is_by_ring_label_and_deletes_respect_the_resource_version() -> None:
    kube = FakeKube()
    a, b = store(kube, "pod-1_1"), store(kube, "pod-2_1")
    other = KubeLeaseStore(kube, namespace="ops", ring="other", identity="x",  # type: ignore[arg-type]
                           lease_duration=15)
    for s in (a, b, other):
        await s.renew(None, 2)
    views = await a.members(2)
    assert sorted(v.identity for v in views) == ["pod-1_1", "pod-2_1"]
    stale = next(v for v in views if v.identity == "pod-2_1")
    await b.renew("v", 2)  # renewed since the listing: the delete's precondition fails, quietly
    await a.delete(stale, 2)
    assert b.name in kube.leases
    await a.release(2)
    assert a.name not in kube.leases
    await a.renew(None, 2)  # rejoining after a release creates it again
    assert a.name in kube.leases


def test_lease_names_are_dns_names() -> None:
    assert lease_name("widgets", "Pod_A.1") == "widgets-shard-pod-a.1"
    long = dns_name("x" * 300)
    assert len(long) == 253 and long != dns_name("x" * 301)
