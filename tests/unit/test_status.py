"""Status conditions and Events from run results (Operator SDK shape, Kubernetes transition rules)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from ansible_operator.kubetypes import Condition
from ansible_operator.results import FailedTask, RunResult
from ansible_operator.status import (
    CONDITION_TYPES,
    format_time,
    merge_conditions,
    refused_status,
    result_status,
    running_status,
)

T0 = datetime(2026, 11, 22, 13, 45, 1, 123456, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)
T2 = T0 + timedelta(minutes=10)


def result(status: str = "successful", *, failed: FailedTask | None = None, changed: int = 0,
           changed_tasks: tuple[str, ...] = (), unreachable: int = 0, error: str | None = None,
           failures: int | None = None) -> RunResult:
    return RunResult(
        status=status,
        ok=5,
        changed=changed,
        skipped=1,
        failures=(1 if failed else 0) if failures is None else failures,
        unreachable=unreachable,
        rescued=0,
        ignored=0,
        failed_task=failed,
        changed_tasks=changed_tasks,
        requeue_after=None,
        error=error,
    )


def by_type(status: Mapping[str, Any]) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


FAILED = FailedTask(name="create deployment", action="k8s", role="memcached",
                    message="Failed to create object: quota exceeded (403 Forbidden)", host="localhost")


def test_condition_types() -> None:
    assert CONDITION_TYPES == ("Running", "Successful", "Failure")


def test_format_time() -> None:
    assert format_time(T0) == "2026-11-22T13:45:01Z"
    assert (
        format_time(datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-01T10:00:00Z"
    )


def test_running_status_on_fresh_object() -> None:
    st = running_status(None, generation=3, now=T0)
    assert st == {"conditions": [{
        "type": "Running", "status": "True", "reason": "Running", "message": "Running reconciliation",
        "lastTransitionTime": "2026-11-22T13:45:01Z", "observedGeneration": 3,
    }]}


def test_success_after_running() -> None:
    st = running_status({"custom": {"a": 1}}, generation=3, now=T0)
    st = result_status(st, result(changed=2), generation=3, now=T1)
    c = by_type(st)
    assert [x["type"] for x in st["conditions"]] == ["Running", "Successful", "Failure"]
    assert c["Running"]["status"] == "False" and c["Running"]["reason"] == "Successful"
    assert c["Running"]["message"] == "Awaiting next reconciliation"
    assert c["Running"]["lastTransitionTime"] == format_time(T1)  # True -> False is a transition
    assert c["Successful"] == {
        "type": "Successful",
        "status": "True",
        "reason": "Successful",
        "message": "Last reconciliation succeeded",
        "lastTransitionTime": format_time(T1),
        "observedGeneration": 3,
        "ansibleResult": {"ok": 5, "changed": 2, "skipped": 1, "failures": 0, "completion": T1.isoformat()},
    }
    assert c["Failure"]["status"] == "False" and "ansibleResult" not in c["Failure"]
    assert dict(st)["custom"] == {"a": 1}  # a role's own field, kept
    assert st["observedGeneration"] == 3


def test_failure_message_and_conditions() -> None:
    st = result_status({}, result("failed", failed=FAILED), generation=4, now=T0)
    c = by_type(st)
    msg = "memcached : create deployment: Failed to create object: quota exceeded (403 Forbidden)"
    assert c["Failure"]["status"] == "True" and c["Failure"]["reason"] == "Failed"
    assert c["Failure"]["message"] == msg
    assert c["Failure"]["ansibleResult"]["failures"] == 1
    assert c["Successful"]["status"] == "False" and c["Successful"]["reason"] == "Failed"
    assert c["Running"]["status"] == "False" and c["Running"]["reason"] == "Failed"
    assert c["Running"]["message"] == msg


def test_timeout_and_executor_error_messages() -> None:
    c = by_type(
        result_status(None, result("timeout", error="run exceeded the 1h timeout"), generation=1, now=T0)
    )
    assert c["Failure"]["message"] == "run exceeded the 1h timeout"
    c = by_type(result_status(None, result("timeout"), generation=1, now=T0))
    assert c["Failure"]["message"] == "the run timed out"
    c = by_type(result_status(None, result("error", error="worker crashed"), generation=1, now=T0))
    assert c["Failure"]["message"] == "worker crashed"


def test_unreachable_counts_in_failures() -> None:
    st = result_status(None, result("failed", unreachable=1, failures=0), generation=1, now=T0)
    assert by_type(st)["Failure"]["ansibleResult"]["failures"] == 1


def test_last_transition_time_kept_when_status_unchanged() -> None:
    st = result_status(None, result(), generation=1, now=T0)
    st = running_status(st, generation=2, now=T1)
    c = by_type(st)
    assert c["Successful"]["lastTransitionTime"] == format_time(T0)  # untouched by running_status
    assert c["Running"]["lastTransitionTime"] == format_time(T1)
    st = result_status(st, result(changed=1), generation=2, now=T2)
    c = by_type(st)
    assert c["Successful"]["lastTransitionTime"] == format_time(T0)  # still True
    assert c["Successful"]["observedGeneration"] == 2
    assert c["Successful"]["ansibleResult"]["changed"] == 1  # refreshed even though status/reason unchanged
    assert c["Successful"]["ansibleResult"]["completion"] == T2.isoformat()
    assert c["Running"]["lastTransitionTime"] == format_time(T2)
    assert st["observedGeneration"] == 2
    # now it fails: Successful flips, Failure flips
    st = result_status(st, result("failed", failed=FAILED), generation=2, now=T2 + timedelta(minutes=1))
    c = by_type(st)
    assert c["Successful"]["lastTransitionTime"] == format_time(T2 + timedelta(minutes=1))
    assert c["Failure"]["lastTransitionTime"] == format_time(T2 + timedelta(minutes=1))


def test_running_does_not_move_observed_generation() -> None:
    st = result_status(None, result(), generation=1, now=T0)
    st = running_status(st, generation=2, now=T1)
    assert st["observedGeneration"] == 1
    assert by_type(st)["Running"]["observedGeneration"] == 2


def test_role_written_fields_and_conditions_are_kept() -> None:
    current: dict[str, Any] = {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "PodsReady", "message": "3/3",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Running", "status": "True", "reason": "Running", "message": "Running reconciliation",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            "junk entry",
        ],
        "nodes": ["a", "b"],
    }
    st = result_status(current, result(), generation=None, now=T0)
    assert [c["type"] for c in st["conditions"]] == ["Ready", "Running", "Successful", "Failure"]
    assert by_type(st)["Ready"] == current["conditions"][0]
    assert dict(st)["nodes"] == ["a", "b"]
    assert "observedGeneration" not in st and "observedGeneration" not in by_type(st)["Successful"]
    assert current["conditions"][1]["status"] == "True"  # input not mutated


def test_merge_conditions_rules() -> None:
    existing: list[Condition] = [
        {"type": "A", "status": "True", "lastTransitionTime": "old", "message": "m"},
        {"type": "B", "status": "False", "lastTransitionTime": "old"},
    ]
    merged = merge_conditions(existing, [
        {"type": "B", "status": "True", "lastTransitionTime": "new"},
        {"type": "A", "status": "True", "lastTransitionTime": "new", "message": "m2"},
        {"type": "C", "status": "False", "lastTransitionTime": "new"},
    ])
    assert merged == [
        {"type": "A", "status": "True", "lastTransitionTime": "old", "message": "m2"},
        {"type": "B", "status": "True", "lastTransitionTime": "new"},
        {"type": "C", "status": "False", "lastTransitionTime": "new"},
    ]
    assert merge_conditions(None, []) == []


def test_refused_status() -> None:
    msg = "spec.ansibleBecome would set the Ansible variable 'ansible_become'"
    st = refused_status({"x": 1}, message=msg, generation=5, now=T0)
    c = by_type(st)
    assert c["Failure"]["status"] == "True" and c["Failure"]["reason"] == "Refused"
    assert c["Failure"]["message"] == msg and "ansibleResult" not in c["Failure"]
    assert c["Successful"]["status"] == "False" and c["Running"]["status"] == "False"
    assert st["observedGeneration"] == 5 and dict(st)["x"] == 1




# ---- --sdk-conditions and --kstatus-conditions ------------------------------------------------------

from ansible_operator.status import Conditions, interrupted_status  # noqa: E402

SDK = Conditions(sdk=True)
KSTATUS = Conditions(kstatus=True)


def test_sdk_conditions_are_the_sdks_markrunning_and_markdone() -> None:
    """ansible-operator-plugins internal/ansible/controller/reconcile.go: markRunning sets Successful False
    (reason and message kept) and Running True; markDone after a success sets Running True with reason
    Successful, Failure False with empty reason; after a failure Running only flips to False."""
    done = result_status(None, result(), generation=1, now=T0, style=SDK)
    c = by_type(done)
    assert (c["Running"]["status"], c["Running"]["reason"], c["Running"]["message"]) == (
        "True", "Successful", "Awaiting next reconciliation")
    assert "ansibleResult" in c["Running"] and "ansibleResult" not in c["Successful"]
    assert (c["Failure"]["status"], c["Failure"]["reason"], c["Failure"]["message"]) == ("False", "", "")
    running = by_type(running_status(done, generation=2, now=T1, style=SDK))
    assert running["Successful"]["status"] == "False"
    assert running["Successful"]["reason"] == "Successful"  # kept, as the SDK keeps it
    assert running["Successful"]["lastTransitionTime"] == format_time(T1)
    assert (running["Running"]["status"], running["Running"]["reason"]) == ("True", "Running")
    failed_task = FailedTask(name="t", action="fail", role=None, message="boom", host="localhost")
    failed = by_type(result_status({"conditions": list(running.values())},
                                   result("failed", failed=failed_task), generation=2, now=T2, style=SDK))
    assert (failed["Running"]["status"], failed["Running"]["reason"]) == ("False", "Running")
    assert (failed["Successful"]["status"], failed["Successful"]["reason"]) == ("False", "")
    assert (failed["Failure"]["status"], failed["Failure"]["reason"]) == ("True", "Failed")
    assert "boom" in failed["Failure"]["message"]


def test_default_conditions_keep_successful_while_a_run_is_in_flight() -> None:
    done = result_status(None, result(), generation=1, now=T0)
    running = by_type(running_status(done, generation=2, now=T1))
    assert running["Successful"]["status"] == "True" and running["Successful"]["observedGeneration"] == 1


def test_kstatus_conditions_follow_a_run() -> None:
    """kstatus (sigs.k8s.io/cli-utils): Reconciling=True means in progress, Stalled=True failed, Ready=True
    with status.observedGeneration = metadata.generation current."""
    running = by_type(running_status(None, generation=1, now=T0, style=KSTATUS))
    assert [running[t]["status"] for t in ("Reconciling", "Ready", "Stalled")] == ["True", "False", "False"]
    done = result_status(None, result(), generation=1, now=T1, style=KSTATUS)
    c = by_type(done)
    assert [c[t]["status"] for t in ("Reconciling", "Ready", "Stalled")] == ["False", "True", "False"]
    assert done["observedGeneration"] == 1 and all(c[t]["observedGeneration"] == 1 for t in c)
    failed_task = FailedTask(name="t", action="fail", role=None, message="boom", host="localhost")
    f = by_type(result_status(done, result("failed", failed=failed_task), generation=2, now=T2,
                              style=KSTATUS))
    assert [f[t]["status"] for t in ("Reconciling", "Ready", "Stalled")] == ["False", "False", "True"]
    assert "boom" in f["Stalled"]["message"] and f["Stalled"]["reason"] == "Failed"
    r = by_type(refused_status(None, message="no", generation=1, now=T0, style=KSTATUS))
    assert (r["Stalled"]["status"], r["Stalled"]["reason"]) == ("True", "Refused")
    i = by_type(interrupted_status(None, message="stopped", generation=1, now=T0, style=KSTATUS))
    assert [i[t]["status"] for t in ("Reconciling", "Ready", "Stalled")] == ["False", "False", "False"]


def test_without_kstatus_no_kstatus_conditions() -> None:
    assert set(by_type(result_status(None, result(), generation=1, now=T0))) == set(CONDITION_TYPES)
