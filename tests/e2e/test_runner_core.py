"""The runner core end to end: CR → role run → objects, status conditions, events, finalizer.

Each test starts the operator as a subprocess against the test run's API server, and is run once per
executor (plain ansible-runner and the warm forking one), on both ends of the supported ansible-core
range: the observable behaviour must be the same. The work queue's and the status writer's own behaviour
(coalescing, back-off, no self-triggered runs) is test_work_queue.py's.
"""

from __future__ import annotations

import functools
import re
import time

import pytest

from .conftest import Cluster, OperatorProcess, wait_for

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
