"""ansible-runner events → RunResult: counts, failed task and message, rescue/ignore, requeue, real runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_operator.executors.base import RunOutcome, RunStatus
from ansible_operator.results import FailedTask, ResultCollector, RunResult
from ansible_operator.wording import failure_message

_counter = 0


def ev(event: str, task: str | None = None, res: dict | None = None, *, host: str = "localhost",
       action: str = "debug", role: str | None = None, stdout: str = "", **data) -> dict:
    """An event dict shaped like ansible-runner 2.4's (fields trimmed to those results.py may read)."""
    global _counter
    _counter += 1
    event_data: dict = {"playbook": "pb.yml", "play": "localhost", "play_pattern": "localhost"}
    if task is not None:
        event_data.update(task=task, task_action=action, resolved_action=f"ansible.builtin.{action}",
                          host=host, remote_addr=host, task_path=f"/p/pb.yml:{_counter}")
    if role:
        event_data["role"] = role
    if res is not None:
        event_data["res"] = res
    event_data.update(data)
    return {"uuid": f"u{_counter}", "counter": _counter, "stdout": stdout, "event": event,
            "created": "2026-11-22T13:53:58.773566+00:00", "runner_ident": "r", "event_data": event_data}


def stats(**counts) -> dict:
    keys = ("ok", "changed", "dark", "failures", "ignored", "processed", "rescued", "skipped")
    per_host: dict[str, Any] = {k: ({"localhost": counts[k]} if counts.get(k) else {}) for k in keys}
    return ev("playbook_on_stats", **per_host)


def outcome(status: RunStatus = "successful", rc: int | None = 0, error: str | None = None) -> RunOutcome:
    return RunOutcome(status=status, rc=rc, artifacts_dir=Path("/tmp/x"), error=error)


def collect(events, out: RunOutcome) -> RunResult:
    c = ResultCollector()
    for e in events:
        c.feed(e)
    return c.finish(out)


# A verbatim runner_on_failed captured from ansible-runner 2.4.3 / ansible-core 2.19 (command module).
CAPTURED_FAILED = {
    "uuid": "2af2b501-84e1-4b32-984f-abdab443885d",
    "counter": 40,
    "stdout": "fatal: [localhost]: FAILED! => ...",
    "start_line": 40,
    "end_line": 41,
    "runner_ident": "f50fd2c7",
    "event": "runner_on_failed",
    "pid": 10023,
    "created": "2026-11-22T13:54:00.148293+00:00",
    "parent_uuid": "02fc0000-0001-2ce5-4a06-00000000000e",
    "event_data": {
        "playbook": "pb.yml",
        "playbook_uuid": "1ff61ae8",
        "play": "localhost",
        "play_uuid": "02fc0000-0002",
        "play_pattern": "localhost",
        "task": "real failure",
        "task_uuid": "02fc0000-000e",
        "task_action": "command",
        "resolved_action": "ansible.builtin.command",
        "task_args": "",
        "task_path": "/tmp/rr/project/pb.yml:24",
        "host": "localhost",
        "remote_addr": "localhost",
        "res": {
            "changed": True,
            "stdout": "",
            "stderr": "ls: cannot access '/nonexistent-xyz': No such file or directory",
            "rc": 2,
            "cmd": ["ls", "/nonexistent-xyz"],
            "msg": "non-zero return code",
            "stdout_lines": [],
            "stderr_lines": ["ls: cannot access '/nonexistent-xyz': No such file or directory"],
            "exception": "(traceback unavailable)",
            "_ansible_no_log": False,
        },
        "start": "2026-11-22T13:53:59.823789+00:00",
        "end": "2026-11-22T13:54:00.148293+00:00",
        "duration": 0.324504,
        "ignore_errors": None,
        "event_loop": None,
        "uuid": "2af2b501",
    },
}


def test_successful_run_counts_from_stats_and_changed_tasks() -> None:
    r = collect([
        ev("playbook_on_start"),
        ev("playbook_on_task_start", "ok task"),
        ev("runner_on_start", "ok task"),
        ev("runner_on_ok", "ok task", {"msg": "hi", "changed": False}),
        ev("runner_on_ok", "create deployment", {"changed": True}, action="k8s", role="memcached"),
        ev("runner_on_ok", "create deployment", {"changed": True}, action="k8s", role="memcached"),
        ev("runner_on_skipped", "skipped", {"skip_reason": "Conditional result was False"}),
        stats(ok=3, changed=1, skipped=1, processed=1),
    ], outcome())
    assert r.succeeded and r.status == "successful"
    assert (r.ok, r.changed, r.skipped, r.failures, r.unreachable, r.rescued, r.ignored) == (
        3,
        1,
        1,
        0,
        0,
        0,
        0,
    )
    assert r.changed_tasks == ("memcached : create deployment",)
    assert r.failed_task is None and r.message == "" and r.stats_seen


def test_failed_task_from_captured_event() -> None:
    r = collect([CAPTURED_FAILED, stats(ok=1, failures=1)], outcome("failed", 2))
    assert not r.succeeded
    assert r.failed_task == FailedTask(
        name="real failure",
        action="command",
        role=None,
        message="ls: cannot access '/nonexistent-xyz': No such file or directory (rc=2)",
        host="localhost",
    )
    assert r.failures == 1
    assert r.message.startswith("real failure: ls: cannot access")
    assert r.changed_tasks == ("real failure",)  # command reported changed even though it failed


def test_ignored_failure_is_not_the_failed_task() -> None:
    r = collect([
        ev("runner_on_failed", "ignored", {"msg": "nope", "rc": 1}, action="command", ignore_errors=True),
        ev("runner_on_ok", "after", {"changed": False}),
        stats(ok=2, ignored=1),
    ], outcome())
    assert r.succeeded and r.failed_task is None and r.ignored == 1


def test_rescued_failure_forgotten_when_stats_show_no_failures() -> None:
    c = ResultCollector()
    c.feed(ev("runner_on_failed", "rescued", {"msg": "will be rescued"}, action="fail"))
    assert c.failed_task is not None and c.failed_task.message == "will be rescued"  # partial view
    c.feed(ev("runner_on_ok", "rescue handler", {"changed": False}))
    c.feed(stats(ok=1, rescued=1))
    r = c.finish(outcome())
    assert r.succeeded and r.failed_task is None and r.rescued == 1


def test_rescued_then_real_failure_reports_the_real_one() -> None:
    r = collect([
        ev("runner_on_failed", "rescued", {"msg": "will be rescued"}, action="fail"),
        ev("runner_on_failed", "real", {"msg": "boom"}, action="fail", role="app"),
        stats(ok=1, rescued=1, failures=1),
    ], outcome("failed", 2))
    assert r.failed_task is not None
    assert r.failed_task.name == "real" and r.failed_task.role == "app"
    assert r.message == "app : real: boom"


def test_unreachable_counts_as_failure() -> None:
    r = collect(
        [
            ev(
                "runner_on_unreachable",
                "ping",
                {"msg": "Failed to connect to the host via ssh", "unreachable": True},
            ),
            stats(dark=1),
        ],
        outcome("failed", 4),
    )
    assert not r.succeeded and r.unreachable == 1 and r.failures == 0
    assert r.failed_task is not None
    assert r.failed_task.message == "Failed to connect to the host via ssh"


def test_no_stats_counts_derived_from_events_on_timeout() -> None:
    c = ResultCollector()
    for e in [
        ev("runner_on_ok", "a", {"changed": True}),
        ev("runner_item_on_ok", "loop", {"changed": True, "item": 1}),  # items are not counted
        ev("runner_on_ok", "loop", {"changed": False, "results": []}),
        ev("runner_on_skipped", "s"),
        ev("runner_on_failed", "ign", {"msg": "x"}, ignore_errors=True),
        ev("runner_on_start", "long task"),
    ]:
        c.feed(e)
    assert c.stats == dict(ok=3, changed=1, skipped=1, failures=0, unreachable=0, rescued=0, ignored=1)
    r = c.finish(outcome("timeout", None, error="run exceeded the 1h0m0s timeout"))
    assert not r.stats_seen and r.status == "timeout" and not r.succeeded
    assert (r.ok, r.changed, r.skipped, r.ignored) == (3, 1, 1, 1)
    assert r.message == "run exceeded the 1h0m0s timeout"


def test_timeout_without_error_text() -> None:
    r = collect([ev("runner_on_ok", "a", {})], outcome("timeout", None))
    assert r.message == "the run timed out"
    r = collect([], outcome("canceled", None))
    assert r.message == "the run was canceled"


def test_failed_task_without_stats_kept() -> None:
    r = collect([ev("runner_on_failed", "t", {"msg": "bad"})], outcome("error", None, error="worker crashed"))
    assert r.failed_task is not None
    assert r.failed_task.message == "bad" and r.failures == 1
    assert r.message == "t: bad"  # the task is more specific than the executor error
    assert r.error == "worker crashed"


def test_ansible_error_outside_tasks() -> None:
    r = collect([
        ev("verbose", stdout="\x1b[0;31m[ERROR]: couldn't resolve module/action 'nosuchmodule'. This often"
                             " indicates a misspelling.\x1b[0m"),
        ev("verbose", stdout="\x1b[0;31mOrigin: /p/syntax.yml:3:7\x1b[0m"),
    ], outcome("failed", 4))
    assert (
        r.ansible_error
        == "couldn't resolve module/action 'nosuchmodule'. This often indicates a misspelling."
    )
    assert r.message == r.ansible_error
    assert not r.stats_seen


def test_status_failed_without_any_detail() -> None:
    r = collect([stats(ok=1)], outcome("failed", 3))
    assert not r.succeeded and r.message == "the run ended with status failed (rc=3)"


def test_requeue_after_last_value_wins() -> None:
    r = collect([
        ev("runner_on_ok", "rq", {"changed": False, "requeue_after_seconds": 30}),
        ev("runner_on_ok", "rq2", {"changed": False, "results": [{"requeue_after_seconds": 5.5}]}),
        ev("runner_on_ok", "junk", {"requeue_after_seconds": "soon"}),
        ev("runner_on_ok", "neg", {"requeue_after_seconds": -1}),
        stats(ok=4),
    ], outcome())
    assert r.requeue_after == 5.5
    assert collect([stats(ok=0)], outcome()).requeue_after is None


K8S_422 = (
    'Failed to create object: b\'{"kind":"Status","apiVersion":"v1","metadata":{},'
    '"status":"Failure","message":"Memcached.cache.example.com \\\\"m1\\\\" is invalid: spec.size:'
    ' Invalid value: -1: spec.size in body should be greater than or equal to 0","reason":"Invalid",'
    '"details":{"name":"m1"},"code":422}\\n\''
)


@pytest.mark.parametrize(
    "res, expected",
    [
        ({"msg": "custom failure"}, "custom failure"),
        (
            {"msg": "non-zero return code", "stderr": "line1\nthe real problem\n", "rc": 3},
            "the real problem (rc=3)",
        ),
        (
            {"msg": "non-zero return code", "stderr": "", "stdout": "out\nlast out", "rc": 1},
            "last out (rc=1)",
        ),
        ({"msg": "non-zero return code", "rc": 5}, "non-zero return code (rc=5)"),
        (
            {
                "msg": "MODULE FAILURE\nSee stdout/stderr for the exact error",
                "module_stderr": "Traceback...\nKeyError: 'x'\n",
                "rc": 1,
            },
            "KeyError: 'x'",
        ),
        ({"exception": "Traceback\n  File\nRuntimeError: bad thing"}, "RuntimeError: bad thing"),
        ({"exception": "(traceback unavailable)"}, "task failed"),
        (
            {
                "censored": "the output has been hidden due to the fact that 'no_log: true'"
                " was specified for this result"
            },
            "the output has been hidden due to the fact that 'no_log: true' was specified for this result",
        ),
        ({"msg": "line one\n  line two"}, "line one line two"),
        ({"msg": {"structured": True}}, '{"structured": true}'),
        (
            {
                "msg": "All items completed",
                "results": [
                    {"failed": False, "item": 1},
                    {"failed": True, "msg": "item broke", "item": "b", "_ansible_item_label": "b"},
                ],
            },
            "item broke (item='b')",
        ),
        (
            {"msg": K8S_422, "exception": "Traceback ..."},
            'Failed to create object: Memcached.cache.example.com "m1" is invalid:'
            " spec.size: Invalid value: -1:"
            " spec.size in body should be greater than or equal to 0 (422 Invalid)",
        ),
        (
            {"msg": 'Failed to patch object: {"message": "conflict", "code": 409, "reason": "Conflict"}'},
            "Failed to patch object: conflict (409 Conflict)",
        ),
        (
            {"msg": "Failed to apply patch", "error": 404, "status": 404, "reason": "Not Found"},
            "Failed to apply patch (404 Not Found)",
        ),
        ({"msg": "x" * 5000}, "x" * 999 + "…"),
        (None, "task failed"),
    ],
)
def test_failure_message(res, expected: str) -> None:
    assert failure_message(res) == expected


# ---- real ansible-runner runs (a few; ~1-2 s each) -----------------------------------------------------

MIXED = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: ok task
      debug: msg=hi
    - name: changed task
      command: "true"
    - name: skipped
      debug: msg=x
      when: false
    - name: ignored failure
      command: "false"
      ignore_errors: true
    - block:
        - name: rescued failure
          fail: msg="will be rescued"
      rescue:
        - debug: msg=rescued
    - name: loop task
      debug: msg="{{ item }}"
      loop: [1, 2]
    - name: real failure
      command: ls /nonexistent-results-test
"""

SYNTAX = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: x
      nosuchmodule_xyz: {}
"""


def run_real(tmp_path: Path, playbook: str) -> tuple[ResultCollector, RunOutcome, list[dict]]:
    ansible_runner = pytest.importorskip("ansible_runner")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "pb.yml").write_text(playbook)
    events: list[dict] = []
    collector = ResultCollector()

    def handler(e: dict) -> bool:
        events.append(e)
        collector.feed(e)
        return True

    bindir = str(Path(sys.executable).parent)
    r = ansible_runner.run(
        private_data_dir=str(tmp_path),
        playbook="pb.yml",
        quiet=True,
        event_handler=handler,
        inventory="localhost ansible_connection=local",
        timeout=120,
        envvars={
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_HOME": str(tmp_path / "ansible_home"),
        },
    )
    return collector, RunOutcome(status=r.status, rc=r.rc, artifacts_dir=tmp_path / "artifacts"), events


def test_real_run_mixed_playbook(tmp_path: Path) -> None:
    collector, out, events = run_real(tmp_path, MIXED)
    r = collector.finish(out)
    assert out.status == "failed", [e.get("stdout") for e in events]
    assert r.stats_seen
    assert (r.failures, r.rescued, r.ignored, r.skipped, r.unreachable) == (1, 1, 1, 1, 0)
    assert r.changed == 2  # "changed task" and the ignored command
    assert r.failed_task is not None
    assert r.failed_task.name == "real failure" and r.failed_task.action == "command"
    assert r.failed_task.host == "localhost"
    assert "No such file or directory" in r.failed_task.message and "(rc=2)" in r.failed_task.message
    assert "changed task" in r.changed_tasks
    assert not r.succeeded


def test_real_run_module_not_found(tmp_path: Path) -> None:
    collector, out, _ = run_real(tmp_path, SYNTAX)
    r = collector.finish(out)
    assert out.status == "failed"
    assert r.failed_task is None
    assert r.ansible_error and "nosuchmodule_xyz" in r.ansible_error
    assert "nosuchmodule_xyz" in r.message


def test_operator_sdk_requeue_after_period_is_understood() -> None:
    """The real operator_sdk.util.requeue_after returns ``period`` (a Go duration), not our key."""
    from pathlib import Path

    from ansible_operator.executors.base import RunOutcome
    from ansible_operator.results import ResultCollector

    collector = ResultCollector()
    collector.feed({"event": "runner_on_ok", "event_data": {
        "task": "Requeue", "task_action": "operator_sdk.util.requeue_after", "host": "localhost",
        "res": {"changed": False, "period": "1m30s"}}})
    collector.feed({"event": "runner_on_ok", "event_data": {
        "task": "Unrelated", "task_action": "ansible.builtin.debug", "host": "localhost",
        "res": {"changed": False, "period": "5s"}}})
    result = collector.finish(RunOutcome(status="successful", rc=0, artifacts_dir=Path("/nonexistent")))
    assert result.requeue_after == 90.0


# ---- redaction of Secret values (issue 11, defect 4) ---------------------------------------------------

from ansible_operator.wording import REDACTED, redact_result  # noqa: E402


def test_redact_secret_objects_and_their_values_in_free_text() -> None:
    res: dict[str, Any] = {
        "changed": True,
        "result": {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "db"}, "type": "Opaque",
                   "data": {"password": "aHVudGVyMjI="}, "stringData": {"token": "tok-123456"}},
        "msg": "created db with hunter22 and tok-123456",
        "diff": [{"after": {"data": {"password": "aHVudGVyMjI="}, "kind": "Secret"}}],
    }
    out = redact_result(res)
    assert out["result"]["data"] == {"password": REDACTED} and out["result"]["stringData"] == {
        "token": REDACTED
    }
    assert out["result"]["metadata"] == {"name": "db"}
    assert out["msg"] == f"created db with {REDACTED} and {REDACTED}"
    assert out["diff"][0]["after"]["data"] == {"password": REDACTED}
    assert res["result"]["data"] == {"password": "aHVudGVyMjI="}  # the input is left alone


def test_redact_kindless_list_items_and_module_calls_on_secrets() -> None:
    listed = {"resources": [{"metadata": {"name": "a"}, "type": "kubernetes.io/tls",
                             "data": {"tls.key": "a2V5LWRhdGE="}}]}
    assert redact_result(listed)["resources"][0]["data"] == {"tls.key": REDACTED}
    by_args = {"invocation": {"module_args": {"kind": "Secret"}}, "resources": [{"data": {"x": "eHl6enk="}}]}
    assert redact_result(by_args)["resources"][0]["data"] == {"x": REDACTED}


def test_configmaps_are_not_redacted() -> None:
    cm = {"result": {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "visible"}}}
    assert redact_result(cm) == cm


def test_failed_task_message_never_carries_a_secret() -> None:
    c = ResultCollector()
    c.feed({"event": "runner_on_failed", "event_data": {
        "task": "check", "task_action": "k8s_info", "host": "localhost",
        "res": {"invocation": {"module_args": {"kind": "Secret"}},
                "resources": [{"metadata": {"name": "db"}, "type": "Opaque", "data": {"pw": "aHVudGVyMjI="}}],
                "msg": "unexpected password hunter22"}}})
    assert c.failed_task is not None and c.failed_task.message == f"unexpected password {REDACTED}"


def test_a_secret_seen_earlier_in_the_run_is_scrubbed_from_later_failures() -> None:
    c = ResultCollector()
    c.feed({"event": "runner_on_ok", "event_data": {
        "task": "read", "task_action": "kubernetes.core.k8s_info", "host": "localhost",
        "res": {"resources": [{"kind": "Secret", "metadata": {"name": "db"}, "type": "Opaque",
                               "data": {"pw": "aHVudGVyMjI="}}]}}})
    c.feed({"event": "runner_on_failed", "event_data": {
        "task": "use", "task_action": "fail", "host": "localhost", "res": {"msg": "bad hunter22"}}})
    assert c.failed_task is not None and c.failed_task.message == f"bad {REDACTED}"
