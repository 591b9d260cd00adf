"""Intake decides which watch events are worth a run: generation gating, annotations, selectors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ansible_operator.intake import WatchIntake
from ansible_operator.queue import ObjectKey
from ansible_operator.sandbox.selectors import label_selector_from_dict
from ansible_operator.watches import Watch


class RecordingQueue:
    def __init__(self) -> None:
        self.added: list[ObjectKey] = []
        self.forgotten: list[ObjectKey] = []

    def add(self, key: ObjectKey) -> None:
        self.added.append(key)

    def forget(self, key: ObjectKey) -> None:
        self.forgotten.append(key)


def make_watch(**kw: Any) -> Watch:
    base: dict[str, Any] = dict(group="cache.example.com", version="v1alpha1", kind="Memcached",
                                role=str(Path("/tmp/role")), playbook=None, vars={}, finalizer=None,
                                reconcile_period=None)
    base.update(kw)
    return Watch(**base)


def cr(generation: int | None = 1, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}
    if generation is not None:
        metadata["generation"] = generation
    metadata.update(meta)
    return {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "metadata": metadata,
            "spec": {"size": 1}}


def intake_for(watch: Watch | None = None) -> tuple[WatchIntake, RecordingQueue]:
    queue = RecordingQueue()
    w = watch or make_watch()
    selector = label_selector_from_dict(w.selector) if w.selector else None
    return WatchIntake(w, queue, selector=selector), queue  # type: ignore[arg-type]


KEY = ObjectKey(namespace="ns", name="a")


def test_first_sight_enqueues_and_caches_latest() -> None:
    intake, queue = intake_for()
    intake.handle(None, cr())
    assert queue.added == [KEY]
    assert intake.cache.get(KEY)["spec"] == {"size": 1}


def test_status_only_and_finalizer_writes_do_not_enqueue() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr())
    status_write = cr(resourceVersion="2")
    status_write["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    intake.handle("MODIFIED", status_write)
    intake.handle("MODIFIED", cr(resourceVersion="3", finalizers=["x/finalizer"]))
    assert queue.added == [KEY]
    # ...but the cache still moves to the latest body
    assert intake.cache.get(KEY)["metadata"]["resourceVersion"] == "3"


def test_generation_change_enqueues() -> None:
    intake, queue = intake_for()
    intake.handle("ADDED", cr())
    changed = cr(generation=2, resourceVersion="2")
    changed["spec"]["size"] = 3
    intake.handle("MODIFIED", changed)
    assert queue.added == [KEY, KEY]
    assert intake.cache.get(KEY)["spec"]["size"] == 3


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
    cm["data"] = {"a": "1"}
    intake.handle("ADDED", cm)
    touched = copy.deepcopy(cm)
    touched["metadata"]["resourceVersion"] = "2"
    touched["status"] = {"x": 1}
    intake.handle("MODIFIED", touched)
    edited = copy.deepcopy(touched)
    edited["data"] = {"a": "2"}
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
