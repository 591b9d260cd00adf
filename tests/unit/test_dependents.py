"""Dependent watches on kopf's own stream: the relist after a 410 re-queues owners of what changed unseen."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from ansible_operator.dependents import DependentWatcher, OwnerKinds, _KindWatch
from ansible_operator.owners.injection import DependentKind

OWNER = {"apiVersion": "x.io/v1", "kind": "Thing", "name": "t", "uid": "owner-uid"}
CONFIGMAPS = DependentKind("", "v1", "ConfigMap", "configmaps", True)


def cm(name: str, uid: str, data: str, owned: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"}
    if owned:
        meta["ownerReferences"] = [OWNER]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": data}}


async def test_relist_after_410_requeues_owners_of_deleted_and_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's real infinite_watch/continuous_watch (list, watch, 410, relist) with the HTTP calls scripted."""
    from kopf._cogs.clients import fetching, watching
    from kopf._cogs.structs import references
    from kopf._cogs.structs.credentials import Vault

    listings = [
        [cm("a", "u1", "1"), cm("b", "u2", "1"), cm("c", "u3", "1"), cm("free", "u4", "1", owned=False)],
        [cm("a", "u1", "1"), cm("c", "u3", "2"), cm("free", "u4", "2", owned=False)],  # b gone, c changed
    ]

    async def fetch_objs(**_: Any) -> Any:
        yield listings.pop(0), "10"

    async def watch_objs(**_: Any) -> Any:
        yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    calls: list[tuple[str, str, str | None, str]] = []
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    watcher = DependentWatcher(lambda *a: calls.append(a), settings=settings, vault=Vault(),
                               owner_kinds={("x.io", "Thing")}, cluster_scoped=False)
    watcher._kinds = OwnerKinds({("x.io", "Thing"): "x.io/v1"})
    kw = _KindWatch(watcher, CONFIGMAPS, "ns")
    resource = references.Resource(group="", version="v1", plural="configmaps", kind="ConfigMap",
                                   namespaced=True)
    async for item in watching.infinite_watch(settings=settings, resource=resource,
                                              namespace=references.NamespaceName("ns"), _iterations=2):
        kw._on_item(item)
        if kw.listings == 1:
            assert kw.synced.is_set() and calls == []  # the first listing only records
    assert kw.listings == 2
    assert calls == [("x.io/v1", "Thing", "ns", "t")] * 2  # c changed, b deleted during the gap
    assert set(kw.known) == {"u1", "u3"}
