"""Status names the generation a run applied (issue 11, defect 2), against the real operator.

A run is held in flight (the ``gated`` role) while the spec is edited ten times. The status that run
writes must say ``observedGeneration: 1`` (what its extra vars came from), not the generation read back
when writing; the newer generation then gets its own run, and only that run's status names it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import kubernetes

from .conftest import GROUP, HERE, PLURAL, VERSION, Cluster, default_watch, one_executor, wait_for

pytestmark = one_executor  # about reconcile, not the executor


def _successful_generations(cluster: Cluster, name: str, seen: list[tuple[int | None, int]],
                            stop: threading.Event, ready: threading.Event) -> None:
    """Each distinct (status.observedGeneration, metadata.generation) of Successful=True, in order."""
    w = kubernetes.watch.Watch()
    ready.set()
    for event in w.stream(cluster.custom.list_namespaced_custom_object, GROUP, VERSION, cluster.ns, PLURAL,
                          field_selector=f"metadata.name={name}", timeout_seconds=120):
        obj: dict[str, Any] = event["object"]
        status = obj.get("status") or {}
        ok = any(c.get("type") == "Successful" and c.get("status") == "True"
                 for c in status.get("conditions") or [])
        running = any(c.get("type") == "Running" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
        entry = (status.get("observedGeneration"), obj["metadata"]["generation"])
        if ok and not running and (not seen or seen[-1] != entry):
            seen.append(entry)
        if stop.is_set():
            w.stop()


def test_status_names_the_generation_the_run_applied(cluster: Cluster, start_operator: Any,
                                                       tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    start_operator([default_watch(role=str(HERE / "roles" / "gated"), finalizer=None)])
    seen: list[tuple[int | None, int]] = []
    stop, ready = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_successful_generations, args=(cluster, "edited", seen, stop, ready),
                               daemon=True)
    watcher.start()
    ready.wait(10)
    cluster.create_widget("edited", {"markerDir": str(markers), "color": "c0"})
    wait_for(lambda: (markers / "started").exists(), 60, what="first run started")
    for i in range(1, 11):  # ten spec edits while the first run is in flight
        cluster.patch_widget("edited", {"spec": {"color": f"c{i}"}})
    edited = cluster.get_widget("edited")
    assert edited is not None and edited["metadata"]["generation"] == 11
    (markers / "release").write_text("go")
    cluster.wait_condition("edited", "Successful", generation=11, timeout=90)
    wait_for(lambda: seen and seen[-1][0] == 11, 30, what="the watch saw the final status")
    stop.set()
    # first the run that applied generation 1 said so; then generation 11 got its own run
    assert seen[0] == (1, 11), seen
    assert [observed for observed, _ in seen] == [1, 11], seen
