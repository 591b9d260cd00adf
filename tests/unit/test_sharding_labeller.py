"""--shard-label's labeller: each replica labels the unlabelled objects the ring gives it, and any object
seen with another bucket's label, through the API client; failures are retried at the next sweep."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any, cast

from ansible_operator.kube import NotFound, ResourceRef, ServerError
from ansible_operator.kubetypes import KubeObject
from ansible_operator.sharding.labeller import ShardLabeller
from ansible_operator.sharding.ring import HashRing
from ansible_operator.sharding.serverside import SHARD_LABEL, BucketLabels

REF = ResourceRef("x.io", "v1", "things", namespaced=True)


def obj(name: str, uid: str, label: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid}
    if label is not None:
        meta["labels"] = {SHARD_LABEL: label}
    return {"metadata": meta}


class FakeKube:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.listed: list[tuple[str, list[tuple[str, str]]]] = []
        self.patched: dict[str, dict[str, Any]] = {}
        self.fail_list = 0
        self.gone: set[str] = set()

    async def request(self, method: str, path: str, *, query: list[tuple[str, str]]) -> Any:
        assert method == "GET"
        self.listed.append((path, query))
        if self.fail_list:
            self.fail_list -= 1
            raise ServerError(0, "ServiceUnavailable", "GET: connection refused")
        return {"items": [i for i in self.items if i["metadata"]["name"] not in self.patched]}

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> Any:
        if name in self.gone:
            return None
        return next((i for i in self.items if i["metadata"]["name"] == name), None)

    async def merge_patch(self, ref: ResourceRef, namespace: str | None, name: str,
                          patch: dict[str, Any]) -> Any:
        if name in self.gone:
            raise NotFound(404, "NotFound", name)
        self.patched[name] = patch
        return {}


async def test_each_replica_labels_the_unlabelled_objects_it_owns_and_any_with_a_wrong_bucket() -> None:
    rng = random.Random(4)
    labels = BucketLabels("uid")
    ring = HashRing(["a", "b"])
    items = [obj(f"o{i}", str(uuid.UUID(int=rng.getrandbits(128), version=4))) for i in range(30)]
    kube = FakeKube(items)
    kube.gone = {"o0"}  # deleted meanwhile: skipped
    kube.fail_list = 1  # the first sweep fails: retried at the next
    labeller = ShardLabeller(kube, lambda: _ref(), ["ns"], labels, identity="a",  # type: ignore[arg-type]
                             ring=lambda: ring, interval=0.01)
    task = asyncio.create_task(labeller.run())
    try:
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(kube.listed) >= 3:
                break
        mine = {i["metadata"]["name"] for i in items if labels.owner(ring, i) == "a"} - {"o0"}  # type: ignore[arg-type]
        assert 5 < len(mine) < 25
        assert set(kube.patched) == mine
        for name, patch in kube.patched.items():
            item = next(i for i in items if i["metadata"]["name"] == name)
            assert patch == {"metadata": {"uid": item["metadata"]["uid"],
                                          "labels": {SHARD_LABEL: labels.expected(item)}}}  # type: ignore[arg-type]
        path, query = kube.listed[-1]
        assert path == "/apis/x.io/v1/namespaces/ns/things"
        assert dict(query) == {"labelSelector": labels.unlabelled_selector(), "resourceVersion": "0"}
        # another replica's object seen with another bucket's label: labelled anyway (its owner can't see it)
        theirs = next(i for i in items if labels.owner(ring, i) == "b"  # type: ignore[arg-type]
                      and i["metadata"]["name"] != "o0")
        wrong = f"{(int(labels.expected(theirs) or '0', 16) + 1) % 256:02x}"  # type: ignore[arg-type]
        labeller.request(obj(theirs["metadata"]["name"], theirs["metadata"]["uid"], wrong))  # type: ignore[arg-type]
        for _ in range(200):
            await asyncio.sleep(0.01)
            if theirs["metadata"]["name"] in kube.patched:
                break
        assert kube.patched[theirs["metadata"]["name"]]["metadata"]["labels"] == {
            SHARD_LABEL: labels.expected(theirs)}  # type: ignore[arg-type]
        assert labeller.labelled == len(mine) + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_no_labels_before_a_ring_that_has_us() -> None:
    kube = FakeKube([obj("o1", "u1")])
    labeller = ShardLabeller(kube, lambda: _ref(), ["ns"], BucketLabels("uid"),  # type: ignore[arg-type]
                             identity="a", ring=lambda: HashRing(["b"]), interval=0.01)
    task = asyncio.create_task(labeller.run())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert kube.listed == [] and kube.patched == {}


async def _ref() -> ResourceRef:
    return REF


async def test_an_object_that_left_the_watch_is_reported_gone_only_when_it_is() -> None:
    """A DELETED event from a label-selected watch may be a label change: the labeller asks the API server;
    gone() only for an object missing or replaced by a new one of the same name."""
    kube = FakeKube([obj("kept", "u1"), obj("renewed", "u3")])
    kube.gone = {"deleted"}
    labeller = ShardLabeller(kube, lambda: _ref(), ["ns"], BucketLabels("uid"),  # type: ignore[arg-type]
                             identity="a", ring=lambda: None, interval=0.01)
    said: list[str] = []
    for name, uid in (("kept", "u1"), ("deleted", "u2"), ("renewed", "u-old")):
        labeller.verify(cast(KubeObject, obj(name, uid)), lambda name=name: said.append(name))  # type: ignore[misc]
    task = asyncio.create_task(labeller.run())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert sorted(said) == ["deleted", "renewed"]
