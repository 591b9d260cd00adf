"""The runner core end to end: CR → role run → objects, status conditions, events, finalizer.

Each test starts the operator as a subprocess against the test run's API server, and is run once per
executor (plain ansible-runner and the warm forking one): the observable behaviour must be the same. The
tests of the work queue's and the status writer's own behaviour (coalescing, back-off, no self-triggered
runs) run on one (``ONE_EXECUTOR``): what an executor reports of a run is the executor contract tests'
(tests/unit/test_executor_warm.py, both executors), and each runner run costs ~2.8 CPU s.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import HERE, Cluster, OperatorProcess, default_watch, one_executor, wait_for

pytestmark = pytest.mark.e2e


def test_create_edit_delete_lifecycle(cluster: Cluster, start_operator) -> None:
    op: OperatorProcess = start_operator()
    cluster.create_widget("w1", {"color": "blue", "size": 2, "nestedConfig": {"innerKey": 1}})

    done = cluster.wait_condition("w1", "Successful", generation=1)
    data = cluster.configmap("w1-out")
    assert data is not None, op.logs()[-3000:]
    # Operator SDK's extra vars: snake_cased spec, raw object and spec, meta, watch vars
    assert data["color"] == "blue" and data["size"] == "2"
    assert data["nested_key"] == "inner_key"
    assert data["raw_kind"] == "Widget"
    assert data["raw_spec_keys"] == "color,nestedConfig,size"
    assert data["watch_var"] == "hello"

    obj = cluster.get_widget("w1")
    assert obj is not None
    assert "test.ansible-operator.dev/finalizer" in obj["metadata"]["finalizers"]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 1
    running = cluster.condition("w1", "Running")
    assert running and running["status"] == "False"  # we don't leave Running=True after a run
    failure = cluster.condition("w1", "Failure")
    assert failure and failure["status"] == "False"
    assert done["ansibleResult"]["failures"] == 0 and done["ansibleResult"]["changed"] >= 1

    # an edit re-runs with the new spec
    cluster.patch_widget("w1", {"spec": {"color": "red"}})
    cluster.wait_condition("w1", "Successful", generation=2)
    assert wait_for(lambda: (cluster.configmap("w1-out") or {}).get("color") == "red", 30)

    # delete: the finalizer role runs first, then the object goes
    cluster.delete_widget("w1")
    cluster.wait_deleted("w1", detail=lambda: op.logs()[-4000:])
    assert cluster.configmap(f"{cluster.ns}-w1-tombstone", namespace="default") == {"deleted": "true"}
    assert len(re.findall(r"finalize run \S+ succeeded", op.logs())) == 1, op.logs()[-3000:]
    # the object is gone, and so are its run artifacts (issue 11 defect 5)
    wait_for(lambda: op.runs("w1") == [], 30, what="w1's artifacts removed")


@one_executor
def test_status_writes_do_not_retrigger_and_unchanged_runs_once(cluster: Cluster, start_operator) -> None:
    op = start_operator()
    cluster.create_widget("quiet", {"color": "green"})
    cluster.wait_condition("quiet", "Successful", generation=1)
    time.sleep(3)  # give any self-triggered run (status/finalizer write → event) the chance to happen
    assert len(op.runs("quiet")) == 1, [r["run_id"] for r in op.runs("quiet")]


def test_failure_condition_names_task_and_emits_warning(cluster: Cluster, start_operator) -> None:
    start_operator()
    cluster.create_widget("bad", {"failMessage": "disk full"})
    cond = cluster.wait_condition("bad", "Failure")
    assert "Fail when asked to" in cond["message"] and "disk full" in cond["message"]
    assert cond["reason"] == "Failed"
    assert cond["ansibleResult"]["failures"] == 1
    successful = cluster.condition("bad", "Successful")
    assert successful and successful["status"] == "False"
    warnings = wait_for(lambda: [e for e in cluster.events_for("bad") if e.type == "Warning"], 20)
    assert any("disk full" in (e.message or "") for e in warnings)

    # fixing the spec clears the failure
    cluster.patch_widget("bad", {"spec": {"failMessage": None}})
    cluster.wait_condition("bad", "Successful", generation=2)
    failure = cluster.condition("bad", "Failure")
    assert failure is not None and failure["status"] == "False"


@one_executor
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


@one_executor
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


def test_cr_values_are_inert_to_jinja(cluster: Cluster, start_operator) -> None:
    start_operator()
    payload = "{{ lookup('pipe', 'id') }}"
    cluster.create_widget("inject", {"templateText": payload})
    cluster.wait_condition("inject", "Successful")
    out = cluster.configmap("inject-out")
    assert out is not None and out["template_text"] == payload


def _has_refused_event(cluster: Cluster, name: str) -> bool:
    return any(e.reason == "Refused" for e in cluster.events_for(name))


def test_ansible_variables_in_spec_are_refused(cluster: Cluster, start_operator) -> None:
    op = start_operator()
    cluster.create_widget("sneaky", {"ansiblePythonInterpreter": "/tmp/evil"})
    cond = cluster.wait_condition("sneaky", "Failure")
    assert "ansible_python_interpreter" in cond["message"]
    assert op.runs("sneaky") == []  # nothing ran
    assert cluster.configmap("sneaky-out") is None
    # every other name ansible-core reserves too, in the form the role would see (issue 11 defect 6)
    cluster.create_widget("omitter", {"color": "red", "omit": "__omit_place_holder__"})
    cluster.create_widget("hoster", {"color": "red", "inventoryHostname": "evil"})
    for name, variable in (("omitter", "'omit'"), ("hoster", "'inventory_hostname'")):
        cond = cluster.wait_condition(name, "Failure")
        assert cond["reason"] == "Refused" and variable in cond["message"], cond
        assert op.runs(name) == [] and cluster.configmap(f"{name}-out") is None
        # the Event is recorded after the status write: the condition can be seen before it exists
        assert wait_for(functools.partial(_has_refused_event, cluster, name), 20,
                        what=f"a Refused Event for {name}")


def test_failing_finalizer_keeps_object_until_it_succeeds(cluster: Cluster, start_operator) -> None:
    op = start_operator()
    cluster.create_widget("sticky", {"finalizerFail": True})
    cluster.wait_condition("sticky", "Successful")
    cluster.delete_widget("sticky")
    cond = cluster.wait_condition("sticky", "Failure")
    assert "finalizer asked to fail" in cond["message"]
    time.sleep(2)
    obj = cluster.get_widget("sticky")
    assert obj is not None and obj["metadata"].get("deletionTimestamp")  # never released early
    # fix it: the next (backed-off) finalizer run succeeds and releases the object
    cluster.patch_widget("sticky", {"spec": {"finalizerFail": False}})
    cluster.wait_deleted("sticky", detail=lambda: op.logs()[-4000:])
    assert cluster.configmap(f"{cluster.ns}-sticky-tombstone", namespace="default") == {"deleted": "true"}


@pytest.mark.parametrize("executor", ["runner"], indirect=True)
def test_bad_watches_file_exits_2_with_one_line(tmp_path: Path, executor: str) -> None:
    bad = tmp_path / "watches.yaml"
    bad.write_text("- group: a.b\n  version: v1\n  kind: K\n  rol: nope\n")
    # a hang guard, not a bound: the CLI imports the runner (~1 CPU s), and beside CI's other stages it
    # took over 60 s once (the 300-Widget sharding test's ~60 concurrent runs were in the run queue)
    proc = subprocess.run([sys.executable, "-m", "ansible_operator", "run", "--watches-file", str(bad)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "watches.yaml" in lines[0] and "rol" in lines[0]
