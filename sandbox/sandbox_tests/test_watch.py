"""Watch semantics through the kubernetes client: initial state, resume, 410 Gone, bookmarks, selectors."""

from __future__ import annotations

import json
import threading
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from ansible_operator_sandbox.testing import SandboxHandle


@pytest.fixture
def core(sandbox: SandboxHandle):
    api = sandbox.api_client()
    yield kubernetes.client.CoreV1Api(api)
    api.close()


def cm(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


def collect(core, count: int, **kwargs) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) for the first ``count`` events of a watch."""
    w = kubernetes.watch.Watch()
    out = []
    for ev in w.stream(core.list_namespaced_config_map, "default", timeout_seconds=5, **kwargs):
        out.append((ev["type"], ev["object"].metadata.name, ev["object"].metadata.resource_version))
        if len(out) >= count:
            w.stop()
    return out


def test_watch_without_rv_starts_with_current_state(core):
    core.create_namespaced_config_map("default", cm("a"))
    core.create_namespaced_config_map("default", cm("b"))
    events = collect(core, 2)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_resume_from_resource_version(core):
    first = core.create_namespaced_config_map("default", cm("a"))
    rv = first.metadata.resource_version
    core.patch_namespaced_config_map("a", "default", {"data": {"x": "1"}})
    core.create_namespaced_config_map("default", cm("b"))
    core.delete_namespaced_config_map("a", "default")
    events = collect(core, 3, resource_version=rv)
    assert [(t, n) for t, n, _ in events] == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    rvs = [int(r) for _, _, r in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


def test_live_events_arrive_in_order(core):
    got: list[tuple[str, str]] = []
    ready = threading.Event()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        lst = core.list_namespaced_config_map("default")
        ready.set()
        for ev in w.stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=lst.metadata.resource_version,
            timeout_seconds=5,
        ):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 3:
                w.stop()

    t = threading.Thread(target=watch)
    t.start()
    ready.wait(5)
    time.sleep(0.2)
    core.create_namespaced_config_map("default", cm("live"))
    core.patch_namespaced_config_map("live", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("live", "default")
    t.join(10)
    assert got == [("ADDED", "live"), ("MODIFIED", "live"), ("DELETED", "live")]


def test_too_old_resource_version_is_410(sandbox: SandboxHandle, core):
    sandbox.sandbox.call(lambda: sandbox.sandbox.server.store.set_history_limit(5))
    first = core.create_namespaced_config_map("default", cm("old"))
    for i in range(10):
        core.patch_namespaced_config_map("old", "default", {"data": {"i": str(i)}})
    # the raw stream carries an ERROR event with a 410 Status, as the real server sends it
    resp = core.list_namespaced_config_map(
        "default",
        watch=True,
        resource_version=first.metadata.resource_version,
        timeout_seconds=2,
        _preload_content=False,
    )
    line = json.loads(resp.readline())
    resp.release_conn()
    assert line["type"] == "ERROR"
    assert line["object"]["code"] == 410 and line["object"]["reason"] == "Expired"
    # kubernetes.watch retries once, then raises ApiException(410)
    with pytest.raises(ApiException) as e:
        collect(core, 1, resource_version=first.metadata.resource_version)
    assert e.value.status == 410


def test_label_selector_transitions(core):
    lst = core.list_namespaced_config_map("default")
    core.create_namespaced_config_map("default", cm("x", {"app": "a"}))
    core.patch_namespaced_config_map(
        "x", "default", {"metadata": {"labels": {"app": "b"}}}
    )  # leaves selection
    core.patch_namespaced_config_map("x", "default", {"metadata": {"labels": {"app": "a"}}})  # re-enters
    core.create_namespaced_config_map("default", cm("y", {"app": "other"}))
    events = collect(core, 3, resource_version=lst.metadata.resource_version, label_selector="app=a")
    assert [(t, n) for t, n, _ in events] == [("ADDED", "x"), ("DELETED", "x"), ("ADDED", "x")]


def test_bookmarks_and_timeout(sandbox: SandboxHandle, core):
    resp = core.list_namespaced_config_map("default", watch=True, allow_watch_bookmarks=True,
                                           resource_version=str(0), timeout_seconds=1, _preload_content=False)
    start = time.monotonic()
    body = resp.read()
    resp.release_conn()
    assert time.monotonic() - start < 5  # the server ended the stream after timeoutSeconds
    assert body == b"" or all(json.loads(x)["type"] in ("ADDED", "BOOKMARK") for x in body.splitlines())


def test_bookmark_sent_on_idle_watch(sandbox: SandboxHandle, core, monkeypatch):
    from ansible_operator_sandbox import server
    monkeypatch.setattr(server, "BOOKMARK_INTERVAL", 0.2)
    lst = core.list_namespaced_config_map("default")
    w = kubernetes.watch.Watch()
    types = []
    for ev in w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=lst.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=3,
    ):
        types.append(ev["type"])
        if ev["type"] == "BOOKMARK":
            w.stop()
    assert types == ["BOOKMARK"]


def test_watch_single_object_path_and_field_selector(core):
    core.create_namespaced_config_map("default", cm("one"))
    core.create_namespaced_config_map("default", cm("two"))
    events = collect(core, 1, field_selector="metadata.name=two")
    assert [(t, n) for t, n, _ in events] == [("ADDED", "two")]
