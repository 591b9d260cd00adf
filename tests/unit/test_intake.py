"""Intake decides which watch events are worth a run: generation gating, annotations, selectors."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any, cast

import pytest

from ansible_operator.intake import WatchIntake
from ansible_operator.kubetypes import KubeObject
from ansible_operator.labels import label_selector_from_dict
from ansible_operator.queue import ObjectKey, Priority
from ansible_operator.watches import Watch


class RecordingQueue:
    def __init__(self) -> None:
        self.added: list[ObjectKey] = []
        self.priorities: list[Priority] = []
        self.delayed: list[tuple[ObjectKey, float, Priority]] = []
        self.forgotten: list[ObjectKey] = []

    def add(self, key: ObjectKey, priority: Priority = Priority.USER) -> None:
        self.added.append(key)
        self.priorities.append(priority)

    def add_after(self, key: ObjectKey, delay: float, priority: Priority = Priority.BACKGROUND) -> None:
        self.delayed.append((key, delay, priority))

    def forget(self, key: ObjectKey) -> None:
        self.forgotten.append(key)


def make_watch(**kw: Any) -> Watch:
    base: dict[str, Any] = dict(group="cache.example.com", version="v1alpha1", kind="Memcached",
                                role=str(Path("/tmp/role")), playbook=None, vars={}, finalizer=None,
                                reconcile_period=None)
    base.update(kw)
    return Watch(**base)


def cr(generation: int | None = 1, **meta: Any) -> KubeObject:
    metadata: dict[str, Any] = {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}
    if generation is not None:
        metadata["generation"] = generation
    metadata.update(meta)
    return cast(KubeObject, {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                             "metadata": metadata, "spec": {"size": 1}})


def intake_for(watch: Watch | None = None,
               forgotten: list[tuple[ObjectKey, str]] | None = None) -> tuple[WatchIntake, RecordingQueue]:
    queue = RecordingQueue()
    w = watch or make_watch()
    selector = label_selector_from_dict(w.selector) if w.selector else None

    def on_forget(key: ObjectKey, old: KubeObject) -> None:
        if forgotten is not None:
            forgotten.append((key, old["metadata"]["uid"]))

    return WatchIntake(w, queue, selector=selector, on_forget=on_forget), queue  # type: ignore[arg-type]


KEY = ObjectKey(namespace="ns", name="a")


def cached(intake: WatchIntake) -> KubeObject:
    """The cached object of KEY, which the test expects to be there."""
    obj = intake.cache.get(KEY)
    assert obj is not None, f"{KEY} is not in the cache"
    return obj


def test_first_sight_enqueues_and_caches_latest() -> None:
    intake, queue = intake_for()
    intake.handle(None, cr())
    assert queue.added == [KEY]
    assert cached(intake)["spec"] == {"size": 1}


def test_status_only_and_finalizer_writes_do_not_enqueue() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr())
    status_write = cr(resourceVersion="2")
    status_write["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    intake.handle("MODIFIED", status_write)
    intake.handle("MODIFIED", cr(resourceVersion="3", finalizers=["x/finalizer"]))
    assert queue.added == [KEY]
    # ...but the cache still moves to the latest body
    assert cached(intake)["metadata"]["resourceVersion"] == "3"


def test_generation_change_enqueues() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr())
    changed = cr(generation=2, resourceVersion="2")
    changed["spec"]["size"] = 3
    intake.handle("MODIFIED", changed)
    assert queue.added == [KEY, KEY]
    assert cached(intake)["spec"]["size"] == 3


def test_annotations_only_with_watch_annotations_changes() -> None:
    plain, plain_q = intake_for()
    watching, watching_q = intake_for(make_watch(watch_annotations_changes=True))
    for intake in (plain, watching):
        intake.handle("ADDED", cr())
        intake.handle("MODIFIED", cr(resourceVersion="2", annotations={"backup-now": "1"}))
    assert plain_q.added == [KEY]
    assert watching_q.added == [KEY, KEY]


def test_last_applied_annotation_is_not_an_annotation_change() -> None:
    intake, queue = intake_for(make_watch(watch_annotations_changes=True))
    intake.handle("ADDED", cr())
    intake.handle("MODIFIED", cr(resourceVersion="2",
                                 annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"}))
    assert queue.added == [KEY]


def test_deletion_start_enqueues_and_deleted_forgets() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr())
    intake.handle("MODIFIED", cr(resourceVersion="2", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert queue.added == [KEY, KEY]
    intake.handle("DELETED", cr(resourceVersion="3", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert queue.forgotten == [KEY]
    assert intake.cache.get(KEY) is None


def test_objects_without_generation_enqueue_on_content_not_status() -> None:
    intake, queue = intake_for()
    cm = cr(generation=None)
    cast(dict[str, Any], cm)["data"] = {"a": "1"}  # a kind of its own (no spec, no generation)
    intake.handle("ADDED", cm)
    touched = copy.deepcopy(cm)
    touched["metadata"]["resourceVersion"] = "2"
    touched["status"] = {"x": 1}
    intake.handle("MODIFIED", touched)
    edited = copy.deepcopy(touched)
    cast(dict[str, Any], edited)["data"] = {"a": "2"}
    intake.handle("MODIFIED", edited)
    assert queue.added == [KEY, KEY]


def test_label_selector_applies_and_start_of_match_enqueues() -> None:
    intake, queue = intake_for(make_watch(selector={"matchLabels": {"tier": "cache"}}))
    intake.handle("ADDED", cr(labels={"tier": "web"}))
    assert queue.added == []
    intake.handle("MODIFIED", cr(resourceVersion="2", labels={"tier": "cache"}))
    assert queue.added == [KEY]


@pytest.mark.parametrize("event_type", [None, "ADDED", "MODIFIED"])
def test_repeated_identical_events_enqueue_once(event_type: str | None) -> None:
    intake, queue = intake_for()
    for _ in range(5):
        intake.handle(event_type, cr())
    assert queue.added == [KEY]


# ---- uid-aware cache and relists (issue 11, defect 1) --------------------------------------------------


def test_recreated_with_same_name_and_generation_is_a_new_object() -> None:
    forgotten: list[tuple[ObjectKey, str]] = []
    intake, queue = intake_for(forgotten=forgotten)
    intake.handle("ADDED", cr(uid="u1"))
    # The watch gap ended in 410; the relist holds a new object with the same name and generation 1.
    intake.handle(None, cr(uid="u2", resourceVersion="9"))
    assert queue.added == [KEY, KEY]
    assert queue.forgotten == [KEY] and forgotten == [(KEY, "u1")]
    assert cached(intake)["metadata"]["uid"] == "u2"


def test_late_deleted_of_the_old_uid_keeps_the_new_object() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr(uid="u1"))
    intake.handle("ADDED", cr(uid="u2", resourceVersion="5"))
    intake.handle("DELETED", cr(uid="u1", resourceVersion="6"))
    assert cached(intake)["metadata"]["uid"] == "u2"
    assert queue.forgotten == [KEY]  # once, for the replacement; not for the stale DELETED


def test_late_events_of_a_deleted_uid_do_not_resurrect_it() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr(uid="u1"))
    intake.handle("DELETED", cr(uid="u1", resourceVersion="2"))
    intake.handle("MODIFIED", cr(uid="u1", generation=2, resourceVersion="1"))
    assert intake.cache.get(KEY) is None
    assert queue.added == [KEY]


def test_relist_forgets_objects_deleted_during_the_gap() -> None:
    forgotten: list[tuple[ObjectKey, str]] = []
    intake, queue = intake_for(forgotten=forgotten)
    intake.handle(None, cr(uid="u1"))
    intake.handle(None, cr(name="b", uid="u2"))
    intake.handle(None, cr(name="c", namespace="other", uid="u3"))
    assert intake.relisted("ns", [("ns", "a", "u1"), ("ns", "b", "u2")]) == 0  # the first listing
    assert intake.relists == 0
    # 410 + relist of "ns": b was deleted during the gap (no DELETED event ever arrives for it).
    assert intake.relisted("ns", [("ns", "a", "u1")]) == 1
    assert intake.relists == 1
    b = ObjectKey(namespace="ns", name="b")
    assert intake.cache.get(b) is None and forgotten == [(b, "u2")] and queue.forgotten == [b]
    # other namespaces are not part of that listing
    assert intake.cache.get(ObjectKey(namespace="other", name="c")) is not None
    # a cluster-wide listing covers them all
    assert intake.relisted(None, []) == 2


def test_relist_with_a_recreated_object_forgets_the_old_uid_either_order() -> None:
    intake, queue = intake_for()
    intake.handle(None, cr(uid="u1"))
    intake.relisted("ns", [("ns", "a", "u9")])  # the listing ends before kopf hands over the new body
    assert intake.cache.get(KEY) is None
    intake.handle(None, cr(uid="u9", resourceVersion="9"))
    assert queue.added == [KEY, KEY]
    intake.relisted("ns", [("ns", "a", "u9")])
    assert cached(intake)["metadata"]["uid"] == "u9"


def script_listings_then_410(monkeypatch: pytest.MonkeyPatch, listings: list[list[KubeObject]]) -> None:
    """kopf's HTTP calls replaced: each listing answers the next of ``listings``, each watch a 410."""
    from kopf._cogs.clients import fetching, watching

    async def fetch_objs(**_: Any) -> Any:
        yield listings.pop(0), "10"

    async def watch_objs(**_: Any) -> Any:
        yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)


async def test_kopf_relist_after_410_reaches_the_intake(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own continuous_watch (list, watch, 410, relist), with the HTTP calls replaced by a script: the
    registered intake takes the events in, and hears of each listing."""
    import kopf
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    import ansible_operator.intake as intake_mod

    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)  # restored afterwards
    monkeypatch.setattr(intake_mod, "_LISTENERS", {})
    script_listings_then_410(monkeypatch, [[cr(uid="u1"), cr(name="b", uid="u2")],
                                           [cr(uid="u3", resourceVersion="20")]])
    intake, queue = intake_for()
    intake.register(kopf.OperatorRegistry())
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    resource = references.Resource(group="cache.example.com", version="v1alpha1", plural="memcacheds",
                                   kind="Memcached", namespaced=True)
    async for item in watching.infinite_watch(settings=settings, resource=resource,
                                              namespace=references.NamespaceName("ns"),
                                              _iterations=2):
        assert not isinstance(item, dict), item  # the intake took every event; kopf got the bookmarks
    assert intake.relists == 1
    assert intake.cache.keys() == [KEY] and cached(intake)["metadata"]["uid"] == "u3"
    assert queue.added == [KEY, ObjectKey("ns", "b"), KEY]  # the re-created "a" runs again
    assert set(queue.forgotten) == {KEY, ObjectKey("ns", "b")}


async def test_a_stream_of_its_own_of_a_watched_kind_gets_every_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind both watched and owned (a CR whose role creates CRs of another watched kind): the dependent
    watch's own stream (kopfcompat.infinite_watch) gets every event, and the intake only those of kopf's
    stream."""
    import kopf
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    import ansible_operator.intake as intake_mod
    from ansible_operator import kopfcompat

    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)  # restored afterwards
    monkeypatch.setattr(intake_mod, "_LISTENERS", {})
    script_listings_then_410(monkeypatch, [[cr(uid="u1")], [cr(name="b", uid="u2")]])
    intake, queue = intake_for()
    intake.register(kopf.OperatorRegistry())
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0

    async def dependent_watch() -> list[Any]:
        items: list[Any] = []
        async for item in kopfcompat.infinite_watch(
                settings, group="cache.example.com", version="v1alpha1", plural="memcacheds",
                kind="Memcached", namespaced=True, namespace="ns"):
            items.append(item)
            if kopfcompat.is_listed(item):
                return items
        return items

    items = await asyncio.create_task(dependent_watch())
    assert [i["object"]["metadata"]["uid"] for i in items if isinstance(i, dict)] == ["u1"]
    assert intake.cache.keys() == [] and queue.added == [] and intake.relists == 0
    # kopf's own stream of the same kind, in another task: the intake's
    resource = references.Resource(group="cache.example.com", version="v1alpha1", plural="memcacheds",
                                   kind="Memcached", namespaced=True)
    async for item in watching.infinite_watch(settings=settings, resource=resource,
                                              namespace=references.NamespaceName("ns"), _iterations=1):
        assert not isinstance(item, dict), item
    assert intake.cache.keys() == [ObjectKey("ns", "b")]


class FakeShards:
    """The intake's ShardFilter: ``outside`` as given; ``left`` asks about every DELETED event (the
    labeller's check, answered by the test through ``pending``)."""

    def __init__(self, outside: Any = None) -> None:
        self._outside = outside
        self.seen_names: list[str] = []
        self.pending: list[Any] = []

    def outside(self, key: ObjectKey, selector: str) -> bool:
        return bool(self._outside and self._outside(key, selector))

    def left(self, obj: KubeObject, gone: Any) -> bool:
        self.pending.append(gone)
        return True

    def seen(self, obj: KubeObject) -> None:
        self.seen_names.append(obj["metadata"]["name"])


def test_an_object_leaving_the_label_selector_is_checked_before_it_counts_as_deleted() -> None:
    """--shard-label: a DELETED event may be the object leaving the watch's label selector (a watch says so
    with the object as it was): dropped from cache and queue, its uid not buried nor its records forgotten
    until the labeller finds it gone; once labelled back it runs again."""
    forgotten: list[tuple[ObjectKey, str]] = []
    intake, queue = intake_for(forgotten=forgotten)
    shards = FakeShards()
    intake.shards = shards
    intake.handle(None, cr(uid="u1"))
    intake.handle("DELETED", cr(uid="u1"))
    assert intake.cache.get(KEY) is None and forgotten == [] and queue.forgotten == [KEY]
    intake.handle("ADDED", cr(uid="u1"))  # labelled again: it exists, nobody calls gone()
    assert intake.cache.get(KEY) is not None and queue.added == [KEY, KEY]
    assert shards.seen_names == ["a", "a"]
    intake.handle("DELETED", cr(uid="u1"))
    shards.pending[-1]()  # the labeller found it gone: now it was deleted
    assert forgotten == [(KEY, "u1")]
    intake.handle("ADDED", cr(uid="u1"))  # late: the uid is buried
    assert intake.cache.get(KEY) is None
    intake.handle("ADDED", cr(uid="u2"))  # a new object of that name; an old check must not drop it
    shards.pending[0]()
    assert intake.cache.uid(KEY) == "u2"


def test_a_sharded_relist_drops_objects_that_moved_away_without_taking_them_for_deleted() -> None:
    """--shard-selector: objects missing from a listing made with a shard selector, and outside that shard,
    moved to another replica: dropped from the cache and the queue, never buried or forgotten as deleted
    (no artifacts removed, a later listing brings them back); a missing object inside the shard was
    deleted."""
    forgotten: list[tuple[ObjectKey, str]] = []
    intake, queue = intake_for(forgotten=forgotten)
    outside_shard = {"u2"}
    intake.shards = FakeShards(lambda key, selector: (
        selector == "ours" and (intake.cache.uid(key) or "") in outside_shard))
    intake.handle(None, cr(uid="u1"))
    intake.handle(None, cr(name="b", uid="u2"))
    intake.handle(None, cr(name="c", uid="u3"))
    assert intake.relisted("ns", [("ns", "a", "u1")], "ours") == 1  # c was deleted, b moved away
    b, c = ObjectKey("ns", "b"), ObjectKey("ns", "c")
    assert intake.cache.get(b) is None and intake.cache.get(c) is None
    assert forgotten == [(c, "u3")] and set(queue.forgotten) == {b, c}
    # b comes back (the ring moved again): it is not a tombstone, it runs
    intake.handle(None, cr(name="b", uid="u2"))
    assert intake.cache.get(b) is not None and queue.added[-1] == b
    intake.handle(None, cr(name="c", uid="u3"))  # c was deleted: a late event of it is dropped
    assert intake.cache.get(c) is None


async def test_a_stream_of_its_own_is_unsharded_and_never_relisted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dependent watch of a sharded kind (children CRs of a watched kind): it lists every object, not this
    replica's shard, and a relist for a new shard selector is not its business (kopf's own stream's)."""
    import kopf
    from kopf._cogs.clients import fetching, watching

    from ansible_operator import kopfcompat

    monkeypatch.setattr(watching, "watch_objs", watching.watch_objs)  # restored afterwards
    listed_with: list[str | None] = []
    watching_now = asyncio.Event()

    async def fetch_objs(*, settings: Any, resource: Any, **_: Any) -> Any:
        listed_with.append(kopfcompat.shard_selector_of(settings, resource))
        yield [], "10"

    async def watch_objs(**_: Any) -> Any:
        watching_now.set()
        await asyncio.Event().wait()
        yield {}

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    kopfcompat.install_watch_restarts()
    settings = kopf.OperatorSettings()
    kopfcompat.set_shard_selector(settings, "x.io", "v1", "Thing", "mine")

    async def consume() -> None:
        async for _item in kopfcompat.infinite_watch(settings, group="x.io", version="v1", plural="things",
                                                     kind="Thing", namespaced=True, namespace="ns"):
            pass

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(watching_now.wait(), 10)
        assert kopfcompat.relist("x.io", "v1", "Thing") == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kopfcompat._RELIST_PENDING.discard(("x.io", "v1", "Thing"))
    assert listed_with == [None]
    assert kopfcompat.shard_selector_of(settings, references_of("x.io", "v1", "things", "Thing")) == "mine"


def references_of(group: str, version: str, plural: str, kind: str) -> Any:
    from kopf._cogs.structs import references

    return references.Resource(group=group, version=version, plural=plural, kind=kind, namespaced=True)


async def test_relist_lists_again_with_the_new_shard_selector_and_reports_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's own infinite_watch with scripted requests: after set_shard_selector + relist, the open watch
    request ends, kopf lists again with the new selector, and the intake hears which selector that listing
    was made with, after it was handed each of the listing's objects (which kopf itself never sees). A
    relist asked for while kopf is listing ends the watch request that follows at once."""
    import asyncio

    import kopf
    from kopf._cogs.clients import fetching, watching

    from ansible_operator import kopfcompat

    # kopf's own, whatever another test of this process installed over it (restored afterwards)
    monkeypatch.setattr(watching, "continuous_watch",
                        getattr(watching.continuous_watch, "__wrapped__", watching.continuous_watch))
    monkeypatch.setattr(watching, "watch_objs", watching.watch_objs)
    listed_with: list[str | None] = []
    reported: list[tuple[str | None, list[str], list[str]]] = []
    watching_now = asyncio.Event()

    async def fetch_objs(*, settings: Any, resource: Any, **_: Any) -> Any:
        selector = kopfcompat.shard_selector_of(settings, resource)
        listed_with.append(selector)
        if len(listed_with) == 2:  # a relist asked for during this listing: its watch ends at once
            kopfcompat.set_shard_selector(settings, "x.io", "v1", "Thing", "third")
            kopfcompat.relist("x.io", "v1", "Thing")
        yield [{"metadata": {"name": f"o{len(listed_with)}", "namespace": "ns", "uid": "u"}}], "10"

    async def watch_objs(**_: Any) -> Any:
        watching_now.set()
        await asyncio.Event().wait()  # nothing, ever
        yield {}

    monkeypatch.setattr(fetching, "fetch_objs", fetch_objs)
    monkeypatch.setattr(watching, "watch_objs", watch_objs)
    kopfcompat.install_watch_restarts()
    delivered: list[str] = []

    def deliver(gvk: tuple[str, str, str], event_type: str | None, body: dict[str, Any]) -> bool:
        assert (gvk, event_type) == (("x.io", "v1", "Thing"), None)
        delivered.append(body["metadata"]["name"])
        return True  # taken: kopf's per-object processing never sees it

    kopfcompat.install_stream_hook(lambda gvk, ns, listed, shard: reported.append(
        (shard, [name for _ns, name, _uid in listed], list(delivered))), deliver)
    settings = kopf.OperatorSettings()
    settings.watching.reconnect_backoff = 0
    kopfcompat.set_shard_selector(settings, "x.io", "v1", "Thing", "first")

    async def consume() -> None:  # kopf's own stream, as kopf's watcher runs it
        from kopf._cogs.structs import references

        resource = references.Resource(group="x.io", version="v1", plural="things", kind="Thing",
                                       namespaced=True)
        async for _item in watching.infinite_watch(settings=settings, resource=resource,
                                                   namespace=references.NamespaceName("ns")):
            reached_kopf.append(_item)

    reached_kopf: list[Any] = []
    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(watching_now.wait(), 10)
        watching_now.clear()
        kopfcompat.set_shard_selector(settings, "x.io", "v1", "Thing", "second")
        assert kopfcompat.relist("x.io", "v1", "Thing") == 1
        while len(listed_with) < 3 or not watching_now.is_set():
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert listed_with == ["first", "second", "third"]
    # each listing is reported after its objects were delivered; kopf got only the "listed" bookmarks
    assert reported == [("first", ["o1"], ["o1"]), ("second", ["o2"], ["o1", "o2"]),
                        ("third", ["o3"], ["o1", "o2", "o3"])]
    assert reached_kopf and all(kopfcompat.is_listed(item) for item in reached_kopf)


async def test_a_long_listing_lets_the_event_loop_run_and_a_failing_event_does_not_stop_the_stream(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """kopf hands a listing's chunk over without awaiting anything: the stream hook lets other tasks run
    (a run's events, the probes) every so many objects. An event the intake fails on is logged, and the
    events after it are taken in."""
    import asyncio

    import kopf
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import references

    import ansible_operator.intake as intake_mod

    monkeypatch.setattr(watching, "continuous_watch",
                        getattr(watching.continuous_watch, "__wrapped__", watching.continuous_watch))
    monkeypatch.setattr(intake_mod, "_LISTENERS", {})
    objects = [cr(name=f"o{i}", uid=f"u{i}") for i in range(1000)]
    objects[10]["metadata"]["generation"] = {"not": "a number"}  # type: ignore[typeddict-item]
    script_listings_then_410(monkeypatch, [objects])
    intake, queue = intake_for()
    intake.register(kopf.OperatorRegistry())
    ticks = 0
    seen_at: list[int] = []
    handle = intake.handle

    def recording(event_type: str | None, obj: KubeObject) -> None:
        seen_at.append(ticks)
        if obj["metadata"]["name"] == "o10":
            raise TypeError("unorderable generation")
        handle(event_type, obj)

    monkeypatch.setattr(intake, "handle", recording)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        resource = references.Resource(group="cache.example.com", version="v1alpha1", plural="memcacheds",
                                       kind="Memcached", namespaced=True)
        async for _item in watching.infinite_watch(settings=kopf.OperatorSettings(), resource=resource,
                                                   namespace=references.NamespaceName("ns"), _iterations=1):
            pass
    finally:
        task.cancel()
    assert len(seen_at) == 1000
    assert len(set(seen_at)) >= 5, "the ticker never ran while the listing was taken in"
    assert len(queue.added) == 999 and ObjectKey("ns", "o10") not in queue.added
    assert "could not take in a listing event" in caplog.text
