"""Reconciler against an in-memory API and executor: what status says about which generation ran."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, cast

from ansible_operator import artifacts
from ansible_operator.executors import reserved
from ansible_operator.executors.base import RunOutcome, RunRequest
from ansible_operator.intake import ObjectCache, fingerprint
from ansible_operator.kube import ApiError, ResourceRef
from ansible_operator.kubetypes import Event, KubeObject
from ansible_operator.owners.credentials import PassThroughCredentials
from ansible_operator.queue import ObjectKey
from ansible_operator.reconcile import Reconciler, Runtime
from ansible_operator.watches import Finalizer, Watch

REF = ResourceRef("cache.example.com", "v1alpha1", "memcacheds", True)
KEY = ObjectKey("ns", "a")


class FakeKube:
    def __init__(self, obj: KubeObject) -> None:
        self.obj = obj
        self.status_patches: list[dict[str, Any]] = []
        self.events: list[Event] = []

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> KubeObject | None:
        return copy.deepcopy(self.obj) if self.obj is not None else None

    async def merge_patch(self, ref: ResourceRef, namespace: str | None, name: str, patch: dict[str, Any],
                          *, subresource: str | None = None) -> KubeObject:
        if self.obj is None:
            raise ApiError(404, "NotFound", name)
        if subresource == "status":
            self.status_patches.append(copy.deepcopy(patch))
            self.obj["status"] = patch["status"]
        return copy.deepcopy(self.obj)

    async def create_event(self, namespace: str, event: Event) -> Event:
        self.events.append(event)
        return {"metadata": {"name": f"e{len(self.events)}"}, "count": 1}

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        return None


class EditingExecutor:
    """Runs "successfully", and while it runs someone edits the spec (generation 1 -> 2)."""

    name = "fake"

    def __init__(self, kube: FakeKube, cache: ObjectCache) -> None:
        self.kube, self.cache = kube, cache
        self.seen_generations: list[int] = []
        self.roles: list[str | None] = []

    async def reserved_names(self) -> frozenset[str]:
        return await reserved.read(sys.executable)

    async def run(self, request: RunRequest, on_event: Any) -> RunOutcome:
        meta_var = request.extra_vars["ansible_operator_meta"]
        self.seen_generations.append(request.extra_vars["_cache_example_com_memcached"]["metadata"]["generation"])
        self.roles.append(request.role)
        assert meta_var["name"] == "a"
        if self.kube.obj["metadata"]["generation"] == 1:
            self.kube.obj["metadata"]["generation"] = 2
            self.kube.obj["spec"]["size"] = 5
            store(self.cache, self.kube.obj)
        return RunOutcome(status="successful", rc=0, artifacts_dir=request.private_data_dir)


def store(cache: ObjectCache, obj: KubeObject) -> None:
    cache.store(KEY, copy.deepcopy(obj), fingerprint(obj, watch_annotations=False, selected=True))


def make(tmp_path: Path) -> tuple[Reconciler, FakeKube, EditingExecutor]:
    obj: KubeObject = {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                       "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                                    "generation": 1},
                       "spec": {"size": 1}}
    watch = Watch(group="cache.example.com", version="v1alpha1", kind="Memcached", role="/tmp/role",
                  playbook=None, vars={}, finalizer=None, reconcile_period=None)
    cache = ObjectCache()
    store(cache, obj)
    kube = FakeKube(obj)
    executor = EditingExecutor(kube, cache)
    runtime = Runtime(kube=kube, executor=executor, artifacts_root=tmp_path,  # type: ignore[arg-type]
                      credentials=PassThroughCredentials(None),
                      janitor=artifacts.Janitor(tmp_path, artifacts.DEFAULT_MAX_BYTES, interval=0))
    return Reconciler(watch, cache, runtime, resource=REF), kube, executor


async def test_observed_generation_is_the_generation_the_run_used(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)
    outcome = await reconciler(KEY)
    final = kube.status_patches[-1]["status"]
    # The run applied generation 1; generation 2 arrived during it: status must not claim 2.
    assert final["observedGeneration"] == 1
    assert {c["type"]: c["observedGeneration"] for c in final["conditions"]} == {
        "Running": 1, "Successful": 1, "Failure": 1}
    # ... and generation 2 gets its own run right away, which then reports 2.
    assert outcome.requeue_after == 0.0 and not outcome.failed
    outcome = await reconciler(KEY)
    assert executor.seen_generations == [1, 2]
    assert kube.status_patches[-1]["status"]["observedGeneration"] == 2
    assert outcome.requeue_after is None


async def test_artifacts_of_a_deleted_object_are_removed(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)
    await reconciler(KEY)
    await reconciler(KEY)
    obj_dir = tmp_path / "cache.example.com" / "v1alpha1" / "Memcached" / "ns" / "a"
    assert len(list(obj_dir.iterdir())) == 2
    # a re-created object with the same name keeps its own runs
    other = artifacts.new_run_dir(tmp_path, artifacts.ObjectPath("cache.example.com", "v1alpha1", "Memcached",
                                                                  "ns", "a"), "29991231T000000Z-abcdef")
    artifacts.write_run(other, artifacts.RunRecord.from_json({"uid": "u2"}, other))
    reconciler.forget(KEY, kube.obj)
    janitor = reconciler.rt.janitor
    assert janitor is not None
    await janitor.settle()  # waits for the background removal
    assert [p.name for p in obj_dir.iterdir()] == [other.name]
    reconciler.forget(KEY, cast(KubeObject, dict(kube.obj, metadata=dict(kube.obj["metadata"], uid="u2"))))
    await janitor.settle()
    assert not obj_dir.exists() and not obj_dir.parent.exists()


async def test_a_run_in_progress_when_its_object_goes_removes_its_artifacts_at_end(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)
    kube.obj["metadata"]["generation"] = 2  # no mid-run edit this time
    store(reconciler.cache, kube.obj)
    obj_dir = tmp_path / "cache.example.com" / "v1alpha1" / "Memcached" / "ns" / "a"
    original_run = executor.run

    async def run_while_deleted(request: RunRequest, on_event: Any) -> RunOutcome:
        reconciler.forget(KEY, kube.obj)  # the DELETED event arrives while the run is going
        janitor = reconciler.rt.janitor
        assert janitor is not None
        await janitor.settle()
        assert request.private_data_dir.is_dir()  # not pulled from under the running executor
        return await original_run(request, on_event)

    executor.run = run_while_deleted  # type: ignore[method-assign]
    await reconciler(KEY)
    janitor = reconciler.rt.janitor
    assert janitor is not None
    await janitor.settle()
    assert not obj_dir.exists()


async def test_janitor_caps_the_tree_after_runs(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)
    reconciler.rt.janitor = artifacts.Janitor(tmp_path, 1, interval=0)
    await reconciler(KEY)  # generation 1 -> 2 during the run
    await reconciler(KEY)
    await reconciler.rt.janitor.settle()
    assert list(artifacts.iter_run_dirs(tmp_path)) == []


async def test_a_listing_removes_runs_of_objects_deleted_while_the_operator_was_down(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)

    def run(name: str, uid: str, run_id: str, namespace: str = "ns") -> Path:
        d = artifacts.new_run_dir(tmp_path, artifacts.ObjectPath("cache.example.com", "v1alpha1", "Memcached",
                                                                 namespace, name), run_id)
        artifacts.write_run(d, artifacts.RunRecord.from_json({"uid": uid}, d))
        return d

    kept = run("a", "u1", "20200101T000000Z-aaaaaa")
    old_incarnation = run("a", "u0", "20200101T000000Z-bbbbbb")
    deleted = run("b", "u2", "20200101T000000Z-cccccc")
    other_ns = run("c", "u3", "20200101T000000Z-dddddd", namespace="other")
    future = run("d", "u4", "29991231T235959Z-eeeeee")  # began after the listing: not its business
    janitor = reconciler.rt.janitor
    assert janitor is not None
    reconciler.cache.listed("ns", frozenset({(KEY, "u1")}))
    await janitor.settle()
    assert kept.exists() and other_ns.exists() and future.exists()
    assert not old_incarnation.exists() and not deleted.exists() and not deleted.parent.exists()
    reconciler.cache.listed(None, frozenset({(KEY, "u1")}))  # a cluster-wide listing covers every namespace
    await janitor.settle()
    assert kept.exists() and not other_ns.exists()


async def test_a_run_starts_from_the_api_not_from_a_lagging_cache(tmp_path: Path) -> None:
    """The cache still holds the object as it was; the API already has it deleting (foreground deletion,
    its dependent's DELETED event re-queued it first): running the role would re-create that dependent."""
    reconciler, kube, executor = make(tmp_path)
    kube.obj["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z", "generation": 2})
    outcome = await reconciler(KEY)
    assert executor.seen_generations == [] and kube.status_patches == [] and kube.events == []
    assert not outcome.failed and outcome.requeue_after is None

    # with a finalizer, the finalizer runs instead, on the object as the API has it
    finalizer = Finalizer(name="test/finalizer", role="/tmp/fin", playbook=None)
    reconciler.watch = Watch(group="cache.example.com", version="v1alpha1", kind="Memcached",
                             role="/tmp/role", playbook=None, vars={}, finalizer=finalizer,
                             reconcile_period=None)
    kube.obj["metadata"]["finalizers"] = ["test/finalizer"]
    await reconciler(KEY)
    assert executor.seen_generations == [2] and executor.roles == ["/tmp/fin"]

    # gone from the API, or re-created under the same name (another uid): nothing runs
    cached = reconciler.cache.get(KEY)
    assert cached is not None
    kube.obj = None  # type: ignore[assignment]
    await reconciler(KEY)
    kube.obj = cast(KubeObject, dict(copy.deepcopy(cached), metadata={
        "name": "a", "namespace": "ns", "uid": "u2", "generation": 1, "resourceVersion": "9"}))
    await reconciler(KEY)
    assert executor.seen_generations == [2]


async def test_a_run_uses_the_newest_spec_even_before_the_cache_has_it(tmp_path: Path) -> None:
    reconciler, kube, executor = make(tmp_path)
    kube.obj["metadata"]["generation"] = 3
    kube.obj["spec"]["size"] = 7
    await reconciler(KEY)
    assert executor.seen_generations == [3]
    assert kube.status_patches[-1]["status"]["observedGeneration"] == 3


async def test_the_artifacts_tree_is_private_after_a_run(tmp_path: Path) -> None:
    """Directories 0700 and files 0600 all the way down, whatever the umask and whatever the executor
    wrote (issue 20: the group/version/kind/namespace levels were 0755, executor files 0644)."""
    import os
    import stat

    reconciler, kube, executor = make(tmp_path)
    original_run = executor.run

    async def writes_files(request: RunRequest, on_event: Any) -> RunOutcome:
        out = request.private_data_dir / "artifacts" / request.run_id
        out.mkdir(parents=True, mode=0o755)
        (out / "stdout").write_text("task output")
        os.chmod(out / "stdout", 0o644)
        return await original_run(request, on_event)

    executor.run = writes_files  # type: ignore[method-assign]
    old_umask = os.umask(0o022)
    try:
        await reconciler(KEY)
    finally:
        os.umask(old_umask)
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*") if ".lock" not in p.name}
    assert modes and all(m == (0o700 if p.is_dir() else 0o600) for p, m in modes.items()), {
        str(p.relative_to(tmp_path)): oct(m) for p, m in modes.items() if m not in (0o600, 0o700)}


async def test_a_run_stopped_by_shutdown_leaves_running_false_interrupted(tmp_path: Path) -> None:
    """Issue 20: after a graceful shutdown stopped a run, the CR must not keep Running=True with nobody
    running; Successful and observedGeneration stay what the last finished run said."""
    import asyncio

    reconciler, kube, _ = make(tmp_path)
    kube.obj["status"] = {"observedGeneration": 1, "conditions": [
        {"type": "Successful", "status": "True", "reason": "Successful", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}
    started = asyncio.Event()

    class BlockingExecutor:
        name = "fake"

        async def reserved_names(self) -> frozenset[str]:
            return await reserved.read(sys.executable)

        async def run(self, request: RunRequest, on_event: Any) -> RunOutcome:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("not reached")

    reconciler.rt.executor = BlockingExecutor()  # type: ignore[assignment]
    task = asyncio.create_task(reconciler(KEY))
    await asyncio.wait_for(started.wait(), 10)
    running = {c["type"]: c for c in kube.obj["status"]["conditions"]}["Running"]
    assert running["status"] == "True"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    conditions = {c["type"]: c for c in kube.obj["status"]["conditions"]}
    assert conditions["Running"]["status"] == "False" and conditions["Running"]["reason"] == "Interrupted"
    assert conditions["Successful"]["status"] == "True" and kube.obj["status"]["observedGeneration"] == 1


async def test_an_api_outage_is_one_line_and_a_failed_reconcile_not_a_traceback(tmp_path: Path,
                                                                                caplog: Any) -> None:
    import logging

    from ansible_operator.kube import ServerError

    reconciler, kube, _ = make(tmp_path)

    async def unreachable(*_: Any, **__: Any) -> Any:
        raise ServerError(0, "ServiceUnavailable", "GET /apis/...: connection refused")

    kube.get = unreachable  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG):
        outcome = await reconciler(KEY)
    assert outcome.failed
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines] == [
        "API request failed: 0 ServiceUnavailable: GET /apis/...: connection refused"]
    assert all(r.exc_info is None for r in caplog.records)
