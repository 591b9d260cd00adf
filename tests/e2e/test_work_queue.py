"""The work queue and the status writer end to end: no self-triggered runs, back-off after failures,
rapid edits coalesced.

These run on one executor (``ONE_EXECUTOR``) and one ansible-core (tests/conftest.py
VERSION_INDEPENDENT): what an executor reports of a run is the executor contract tests' (both executors,
both ends of the range), and the one-task Widget roles they run run on both ends in test_runner_core.py.
"""

from __future__ import annotations

import time

import pytest

from .conftest import HERE, Cluster, default_watch, one_executor, wait_for

pytestmark = [pytest.mark.e2e, one_executor]


def test_status_writes_do_not_retrigger_and_unchanged_runs_once(cluster: Cluster, start_operator) -> None:
    op = start_operator()
    cluster.create_widget("quiet", {"color": "green"})
    cluster.wait_condition("quiet", "Successful", generation=1)
    time.sleep(3)  # give any self-triggered run (status/finalizer write → event) the chance to happen
    assert len(op.runs("quiet")) == 1, [r["run_id"] for r in op.runs("quiet")]


def test_failed_runs_back_off_instead_of_hot_looping(cluster: Cluster, start_operator) -> None:
    op = start_operator([default_watch(role=str(HERE / "roles" / "failing"), finalizer=None)])
    cluster.create_widget("loop", {})
    cluster.wait_condition("loop", "Failure")
    first = time.monotonic()
    time.sleep(8)
    runs = op.runs("loop")
    # backoff starts at 2 s and doubles: within ~8 s after the first failure at most 3 more runs can start
    assert 1 <= len(runs) <= 4, [(r["run_id"], r["result"]) for r in runs]
    assert all(r["result"] == "failed" for r in runs if r["result"] != "running")
    assert time.monotonic() - first >= 8
    # the same failure again and again is one Warning Event whose count rises (like client-go's recorder)
    finished_failures = len([r for r in op.runs("loop") if r["result"] == "failed"])
    warnings = [e for e in cluster.events_for("loop") if e.type == "Warning"]
    assert len(warnings) == 1, [(e.metadata.name, e.count) for e in warnings]
    assert warnings[0].count >= min(finished_failures, 2)


def test_rapid_edits_coalesce(cluster: Cluster, start_operator) -> None:
    op = start_operator()
    cluster.create_widget("busy", {"size": 0})
    cluster.wait_condition("busy", "Successful", generation=1)
    for i in range(1, 21):
        cluster.patch_widget("busy", {"spec": {"size": i}})
    cluster.wait_condition("busy", "Successful", generation=21, timeout=90)
    assert wait_for(lambda: (cluster.configmap("busy-out") or {}).get("size") == "20", 30)
    # How many runs the burst overlaps depends on how fast the machine applies 20 patches (a loaded one is
    # slower than a run); what coalescing guarantees does not: runs follow the generations in order (never
    # an older spec after a newer one), the final one ran, and far fewer generations ran than edits were
    # made. A generation may run twice: the role's own write to the owned ConfigMap comes back through
    # the dependent watch and re-queues the owner, as in the SDK (a no-change run), and a failed run is
    # retried. (A run held in flight through a burst gets exactly one follow-up: test_generations.py.)
    runs = sorted(op.runs("busy"), key=lambda r: (r["started"], r["generation"]))
    seen = [(r["generation"], r["result"], r.get("changed_tasks")) for r in runs]
    generations = [r["generation"] for r in runs if r["result"] == "successful"]
    assert generations == sorted(generations) and generations[-1] == 21, seen
    assert len(set(generations)) < 21, seen
