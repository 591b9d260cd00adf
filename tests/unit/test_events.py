"""Kubernetes Events (ansible_operator.events): one shape for every Event, recorded best effort, repeats
aggregated into count/lastTimestamp like client-go's recorder."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from ansible_operator import events
from ansible_operator.kube import Forbidden, NotFound
from ansible_operator.kubetypes import Event, KubeObject
from ansible_operator.queue import ObjectKey
from ansible_operator.results import FailedTask, RunResult

T0 = datetime(2026, 11, 22, 13, 45, 1, 123456, tzinfo=timezone.utc)

OBJ: KubeObject = {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
       "metadata": {"name": "m1", "namespace": "ns1", "uid": "u-1", "resourceVersion": "42"}}
FAILED = FailedTask(name="create deployment", action="k8s", role="memcached",
                    message="Failed to create object: quota exceeded (403 Forbidden)", host="localhost")


def result(status: str = "successful", *, failed: FailedTask | None = None, changed: int = 0,
           changed_tasks: tuple[str, ...] = ()) -> RunResult:
    return RunResult(status=status, ok=5, changed=changed, skipped=1, failures=1 if failed else 0,
                     unreachable=0, rescued=0, ignored=0, failed_task=failed, changed_tasks=changed_tasks,
                     requeue_after=None, error=None)


def test_event_for_failure() -> None:
    ev = events.for_result(OBJ, result("failed", failed=FAILED), now=T0, instance="op-0")
    assert ev == {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": "m1.", "namespace": "ns1"},
        "involvedObject": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "m1",
                           "namespace": "ns1", "uid": "u-1", "resourceVersion": "42"},
        "reason": "ReconcileFailed",
        "message": "memcached : create deployment: Failed to create object: quota exceeded (403 Forbidden)",
        "type": "Warning", "action": "Reconcile",
        "firstTimestamp": "2026-11-22T13:45:01Z", "lastTimestamp": "2026-11-22T13:45:01Z", "count": 1,
        "source": {"component": "ansible-operator"},
        "reportingComponent": "ansible-operator", "reportingInstance": "op-0",
    }


def test_every_event_has_the_same_shape() -> None:
    """Refusals and run results used to be built in two places with different fields (issue 12)."""
    refused = events.refused(OBJ, "spec.omit would set 'omit'", now=T0)
    failed = events.for_result(OBJ, result("failed", failed=FAILED), now=T0, phase="finalize")
    assert failed is not None
    assert set(refused) == set(failed)
    assert refused["reportingInstance"] == failed["reportingInstance"] and refused["reportingInstance"]
    assert (refused["action"], refused["reason"], refused["type"]) == ("Reconcile", "Refused", "Warning")
    assert failed["action"] == "Finalize"


def test_event_for_changes_and_none_when_nothing_changed() -> None:
    changed = ("memcached : deployment", "memcached : service")
    ev = events.for_result(OBJ, result(changed=2, changed_tasks=changed), now=T0,
                           component="memcached-operator")
    assert ev is not None and ev["type"] == "Normal" and ev["reason"] == "ReconcileChanged"
    assert ev["message"] == "2 changed: memcached : deployment, memcached : service"
    assert ev["source"] == {"component": "memcached-operator"}
    assert events.for_result(OBJ, result(), now=T0) is None
    assert events.for_result(OBJ, result("canceled"), now=T0) is None


def test_event_for_cluster_scoped_object_and_long_message() -> None:
    obj: KubeObject = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}}
    long = FailedTask(name="t", action=None, role=None, message="x" * 5000, host=None)
    ev = events.for_result(obj, result("failed", failed=long), now=T0)
    assert ev is not None and ev["metadata"]["namespace"] == "default"
    assert "namespace" not in ev["involvedObject"]
    assert len(ev["message"]) == 1024 and ev["message"].endswith("…")


class FakeApi:
    def __init__(self) -> None:
        self.created: list[Event] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.fail_create: Exception | None = None
        self.expired = False

    async def create_event(self, namespace: str, event: Event) -> Event:
        if self.fail_create:
            raise self.fail_create
        self.created.append(event)
        return {"metadata": {"name": f"m1.{len(self.created)}"}, "count": 1}

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str | None = None,
                      query: Any = None) -> Any:
        if self.expired:
            raise NotFound(404, "NotFound", path)
        self.patched.append((path, body))
        return {}


async def test_recorder_aggregates_repeats_and_survives_errors() -> None:
    api = FakeApi()
    rec = events.EventRecorder(api)
    ev = events.for_result(OBJ, result("failed", failed=FAILED), now=T0)
    await rec.record(OBJ, ev)
    later = events.for_result(OBJ, result("failed", failed=FAILED), now=T0 + timedelta(minutes=1))
    await rec.record(OBJ, later)
    assert len(api.created) == 1
    assert api.patched == [("/api/v1/namespaces/ns1/events/m1.1",
                            {"count": 2, "lastTimestamp": "2026-11-22T13:46:01Z"})]
    api.expired = True  # the Event expired (TTL): a new one is recorded
    await rec.record(OBJ, later)
    assert len(api.created) == 2
    rec.forget(ObjectKey("ns1", "m1"))
    api.expired = False
    await rec.record(OBJ, later)
    assert len(api.created) == 3  # nothing to aggregate with after forget
    api.fail_create = Forbidden(403, "Forbidden", "events is forbidden")
    await rec.record(OBJ, events.refused(OBJ, "x", now=T0))  # logged, not raised
    await rec.record(OBJ, None)


async def test_forbidden_events_are_warned_once_and_still_tried(caplog: pytest.LogCaptureFixture) -> None:
    # the Operator SDK records no Events, so its scaffold's RBAC grants none: one warning, not one per run
    api = FakeApi()
    api.fail_create = Forbidden(403, "Forbidden", "events is forbidden")
    rec = events.EventRecorder(api)
    with caplog.at_level(logging.DEBUG, logger="ansible_operator"):
        for minute in range(3):
            ev = events.for_result(OBJ, result("failed", failed=FAILED), now=T0 + timedelta(minutes=minute))
            await rec.record(OBJ, ev)
    refused = [r for r in caplog.records if "could not record event" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "resources: [events], verbs: [create, patch]" in refused[0].getMessage()
    api.fail_create = None  # granted later: recorded
    await rec.record(OBJ, events.refused(OBJ, "x", now=T0))
    assert len(api.created) == 1
