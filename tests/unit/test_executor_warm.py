"""WarmExecutor behaviour, and the executor contract run against both executors.

The ``contract`` tests are parametrized over ``make_executor("runner")`` and ``make_executor("warm")``:
whatever the queue/status code can observe (status, rc, error, live ordered events, artifacts) must be
the same for both. Warm-only tests cover what only a zygote can do wrong (state leaking between runs in
one zygote, the zygote dying, a child dying).

Streaming is proven without timing: a playbook waits for a file the *test* writes only after it
received an event of that run, so the run can only succeed if events arrive while it runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any, AsyncIterator

import psutil
import pytest
import pytest_asyncio
from executor_helpers import descendants_with, started, write

from ansible_operator.executors import make_executor, reserved
from ansible_operator.executors.base import Executor, RunOutcome, RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import EXECUTOR_RESTARTED, WarmExecutor
from ansible_operator.extravars import Unsafe

pytestmark = [
    pytest.mark.ansible_versions,  # also run on the lowest ansible-core (dev.sh test-ansible-low)
    pytest.mark.asyncio(loop_scope="module"),  # the loop of the module's shared executors
]


# The executors are the module's (started once per xdist worker): a zygote's start-up costs ~1.5 CPU s, and
# runs sharing one zygote is what the warm executor does in an operator. A test about start-up, the zygote's
# lifetime or crashes (a zygote or a child killed, close, idle stops) starts its own.
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def warm() -> AsyncIterator[WarmExecutor]:
    async with started(WarmExecutor(max_workers=4)) as ex:
        yield ex
        assert ex.restarts == 0  # no test's run took the shared zygote down
    assert ex.zygote_pid is None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runner() -> AsyncIterator[Executor]:
    async with started(make_executor("runner", max_workers=4)) as ex:
        yield ex


@pytest_asyncio.fixture(loop_scope="module")  # the loop the module's tests run in
async def own_warm() -> AsyncIterator[WarmExecutor]:
    """A warm executor of the test's own, for a test that kills its zygote or a child of it."""
    async with started(WarmExecutor(max_workers=4)) as ex:
        yield ex
    assert ex.zygote_pid is None


@pytest.fixture(scope="module", params=["runner", "warm"])
def executor(request: pytest.FixtureRequest) -> Executor:
    """``make_executor(name, max_workers=4)``, the module's (``warm`` is that of the warm-only tests)."""
    ex: Executor = request.getfixturevalue(request.param)
    return ex


def request_for(tmp_path: Path, **kw: Any) -> RunRequest:
    rid = new_run_id()
    kw.setdefault("extra_vars", {})
    kw.setdefault("envvars", {"ANSIBLE_GATHERING": "explicit"})
    return RunRequest(run_id=rid, private_data_dir=tmp_path / "runs" / rid, **kw)



def ok_messages(events: list[dict[str, Any]]) -> list[str]:
    return [e["event_data"]["res"].get("msg") for e in events if e["event"] == "runner_on_ok"]


def job_event_files(outcome: RunOutcome) -> list[dict[str, Any]]:
    files = sorted(
        (outcome.artifacts_dir / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-")[0])
    )
    return [json.loads(p.read_text()) for p in files]


def unique_sleep() -> str:
    """A sleep duration no other process on the machine uses: it finds (only) this test's process."""
    return f"{random.randint(200, 899)}.{random.randint(100000, 999999)}"



# ---- contract: both executors ----------------------------------------------------------------------


async def test_contract_events_stream_live_in_order_with_stats_and_artifacts(
        executor: Executor, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: greet
      debug: msg="hello {{{{ who }}}}"
    - name: wait until the test saw the greeting event
      wait_for: path={flag} timeout=60
    - name: change something
      command: /bin/true
""")
    loop_thread = threading.get_ident()
    events: list[dict[str, Any]] = []
    threads: set[int] = set()

    def on_event(ev: dict[str, Any]) -> None:
        events.append(ev)
        threads.add(threading.get_ident())
        if ev["event"] == "runner_on_ok" and ev["event_data"].get("task") == "greet":
            flag.write_text("go")

    outcome = await executor.run(request_for(tmp_path, playbook=pb, extra_vars={"who": "world"}), on_event)

    assert (outcome.status, outcome.rc, outcome.error) == ("successful", 0, None)
    assert threads == {loop_thread}
    counters = [e["counter"] for e in events]
    assert counters == list(range(1, len(events) + 1))
    names = [e["event"] for e in events if e["event"] != "verbose"]
    assert names[0] == "playbook_on_start" and names[-1] == "playbook_on_stats"
    assert ok_messages(events)[0] == "hello world"
    stats = events[-1]["event_data"]
    assert (stats["ok"], stats["changed"], stats["failures"], stats["dark"]) == (
        {"localhost": 3}, {"localhost": 1}, {}, {})
    assert all(e["runner_ident"] == outcome.artifacts_dir.name for e in events)
    assert [e["uuid"] for e in job_event_files(outcome)] == [e["uuid"] for e in events]
    assert (outcome.artifacts_dir / "status").read_text() == "successful"
    assert (outcome.artifacts_dir / "rc").read_text() == "0"
    assert "hello world" in (outcome.artifacts_dir / "stdout").read_text()


async def test_contract_failing_task_reports_failed_with_its_event(
    executor: Executor, tmp_path: Path
) -> None:
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug: msg=before
    - name: boom
      fail: msg="it broke"
    - debug: msg=never
""")
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, playbook=pb), events.append)
    assert (outcome.status, outcome.rc, outcome.error) == ("failed", 2, None)
    failed = [e for e in events if e["event"] == "runner_on_failed"]
    assert len(failed) == 1
    assert failed[0]["event_data"]["task"] == "boom"
    assert failed[0]["event_data"]["res"]["msg"] == "it broke"
    assert events[-1]["event_data"]["failures"] == {"localhost": 1}
    assert "never" not in ok_messages(events)


async def test_contract_playbook_error_outside_tasks_is_named(executor: Executor, tmp_path: Path) -> None:
    pb = write(tmp_path / "pb.yml", "- hosts: localhost\n  tasks:\n    - no_such_module_here: {}\n")
    outcome = await executor.run(request_for(tmp_path, playbook=pb), lambda e: None)
    assert outcome.status == "failed" and outcome.rc not in (0, 2)
    assert outcome.error and "no_such_module_here" in outcome.error


async def test_contract_role_by_path_with_unsafe_extra_vars_kept_literal(
        executor: Executor, tmp_path: Path) -> None:
    role = tmp_path / "roles" / "greeter"
    write(role / "tasks" / "main.yml", """
- name: show
  debug: msg="{{ text }}"
- name: default from the role
  debug: msg="{{ greeting }}"
""")
    write(role / "defaults" / "main.yml", "greeting: hi from defaults\n")
    events: list[dict[str, Any]] = []
    literal = "{{ lookup('env', 'HOME') }}"
    outcome = await executor.run(
        request_for(tmp_path, role=str(role), extra_vars={"text": Unsafe(literal)}), events.append)
    assert outcome.status == "successful", outcome
    assert ok_messages(events) == [literal, "hi from defaults"]
    assert {e["event_data"].get("role") for e in events if e["event"] == "runner_on_ok"} == {"greeter"}


async def test_contract_collection_role_from_a_run_collection_path(
    executor: Executor, tmp_path: Path
) -> None:
    collections = tmp_path / "collections"
    write(collections / "ansible_collections" / "myns" / "mycoll" / "roles" / "hello" / "tasks" / "main.yml",
          '- name: from the collection\n  debug: msg="collection role says {{ word }}"\n')
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, role="myns.mycoll.hello", extra_vars={"word": "hi"},
                                             collections_path=(collections,)), events.append)
    assert outcome.status == "successful", outcome
    assert ok_messages(events) == ["collection role says hi"]


async def test_contract_adjacent_plugins_named_like_builtins_are_the_playbooks(
    executor: Executor, tmp_path: Path
) -> None:
    """A playbook's own ``action_plugins/debug.py`` and ``filter_plugins/core.py`` (files named like
    builtins the zygote has loaded) are the ones a run uses, as in a fresh ansible-playbook; the builtin
    filters of ``core`` stay available. Two runs: the second is a child of a zygote that ran the first."""
    write(tmp_path / "action_plugins" / "debug.py", """
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        return {"msg": "the playbook's debug: " + self._task.args["msg"], "changed": False}
""")
    write(tmp_path / "filter_plugins" / "core.py", """
class FilterModule(object):
    def filters(self):
        return {"shout": lambda value: str(value).upper() + "!"}
""")
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug: msg="{{ 'hi' | shout }} {{ 'a,b' | split(',') | join('+') }}"
""")
    for _ in range(2):
        events: list[dict[str, Any]] = []
        outcome = await executor.run(request_for(tmp_path, playbook=pb), events.append)
        assert outcome.status == "successful", outcome
        assert ok_messages(events) == ["the playbook's debug: HI! a+b"]


async def test_contract_verbosity_is_per_run(executor: Executor, tmp_path: Path) -> None:
    pb = write(
        tmp_path / "pb.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=x\n"
    )
    quiet = await executor.run(request_for(tmp_path, playbook=pb, verbosity=0), lambda e: None)
    events: list[dict[str, Any]] = []
    chatty = await executor.run(request_for(tmp_path, playbook=pb, verbosity=3), events.append)
    # the preamble (version banner, config file...) is one plain 'verbose' event per line, as ansible-runner
    # gives it; from the callback's own messages on, events carry event_data
    plain = [e for e in events if "event_data" not in e]
    assert plain and all(e["event"] == "verbose" and "\n" not in e["stdout"] for e in plain)
    assert plain == events[:len(plain)]
    assert any("version" in e["stdout"] for e in plain)
    assert "Skipping callback" in events[len(plain)]["stdout"]
    again = await executor.run(request_for(tmp_path, playbook=pb, verbosity=0), lambda e: None)
    texts = [(o.artifacts_dir / "stdout").read_text() for o in (quiet, chatty, again)]
    assert "task path:" not in texts[0] and "task path:" not in texts[2]
    assert "task path:" in texts[1]


async def test_contract_tasks_of_two_local_hosts_keep_their_own_task_vars_and_host(
        executor: Executor, tmp_path: Path) -> None:
    """The warm executor runs localhost tasks without a worker fork (``warm.tasks``): what the task
    executor changes (the task templated in place, the loop variable, the worker emptying host vars) must
    not reach the next host or task, a task ``timeout`` still fires, and added hosts work (2.21: inventory
    RPC). The runner executor's forked workers are the reference."""
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - add_host: {name: localhost, groups: [locals], color: red}
    - add_host:
        name: 127.0.0.1
        groups: [locals]
        color: blue
        ansible_connection: local
        ansible_python_interpreter: "{{ ansible_playbook_python }}"
- hosts: locals
  gather_facts: false
  tasks:
    - name: each host templates the task for itself
      debug: msg="{{ inventory_hostname }} is {{ color }}"
    - name: loop
      debug: msg="item {{ item }}"
      loop: [1, 2]
    - name: after the loop
      debug: msg="{{ inventory_hostname }} {{ item | default('no item') }} {{ color }}"
    - name: a task timeout
      command: sleep 30
      timeout: 1
      ignore_errors: true
      when: inventory_hostname == 'localhost'
""")
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, playbook=pb), events.append)
    assert (outcome.status, outcome.rc, outcome.error) == ("successful", 0, None)
    messages = ok_messages(events)
    assert sorted(m for m in messages if m and " is " in m) == ["127.0.0.1 is blue", "localhost is red"]
    items = [e["event_data"]["res"].get("msg") for e in events if e["event"] == "runner_item_on_ok"]
    assert sorted(items) == ["item 1", "item 1", "item 2", "item 2"]
    assert sorted(m for m in messages if m and "no item" in m) == ["127.0.0.1 no item blue",
                                                                   "localhost no item red"]
    (timed_out,) = [e for e in events if e["event"] == "runner_on_failed"]
    assert timed_out["event_data"]["task"] == "a task timeout" and timed_out["event_data"]["ignore_errors"]
    assert "1" in str(timed_out["event_data"]["res"].get("msg")), timed_out["event_data"]["res"]


async def test_contract_timeout_stops_the_run(executor: Executor, tmp_path: Path) -> None:
    marker = unique_sleep()
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - command: /bin/sleep {marker}
""")
    outcome = await executor.run(request_for(tmp_path, playbook=pb, timeout=3), lambda e: None)
    assert outcome.status == "timeout"
    assert outcome.rc == 254
    assert outcome.error and "timeout" in outcome.error
    assert (outcome.artifacts_dir / "status").read_text() == "timeout"
    await _stopped_everything(executor, marker)


async def test_contract_cancel_stops_the_run_and_reraises(executor: Executor, tmp_path: Path) -> None:
    marker = unique_sleep()
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: long
      command: /bin/sleep {marker}
""")
    started = asyncio.Event()

    def on_event(ev: dict[str, Any]) -> None:
        if ev["event"] == "runner_on_start":
            started.set()

    req = request_for(tmp_path, playbook=pb)
    task = asyncio.create_task(executor.run(req, on_event))
    await asyncio.wait_for(started.wait(), 60)
    await _eventually_running(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (req.private_data_dir / "artifacts" / req.run_id / "status").read_text() == "canceled"
    await _stopped_everything(executor, marker)


async def test_contract_concurrent_runs_keep_their_own_vars_and_env(
    executor: Executor, tmp_path: Path
) -> None:
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug: msg="{{ n }}-{{ lookup('env', 'RUN_MARK') }}"
""")
    requests = [
        request_for(
            tmp_path,
            playbook=pb,
            extra_vars={"n": str(i)},
            envvars={"ANSIBLE_GATHERING": "explicit", "RUN_MARK": f"env{i}"},
        )
        for i in range(4)
    ]
    per_run: dict[str, list[dict[str, Any]]] = {r.run_id: [] for r in requests}
    outcomes = await asyncio.gather(*(executor.run(r, per_run[r.run_id].append) for r in requests))
    for i, (req, outcome) in enumerate(zip(requests, outcomes)):
        assert outcome.status == "successful", outcome
        assert ok_messages(per_run[req.run_id]) == [f"{i}-env{i}"]
        assert {e["runner_ident"] for e in per_run[req.run_id]} == {req.run_id}


@pytest.fixture(scope="module")
def fresh_reserved_names() -> frozenset[str]:
    """The reserved names as a fresh interpreter reads them: the reference for both executors."""
    return reserved.read_blocking(sys.executable, cached=False)


async def test_contract_reserved_names_are_those_of_the_runs_ansible_core(
        executor: Executor, fresh_reserved_names: frozenset[str]) -> None:
    expected = fresh_reserved_names
    names = await executor.reserved_names()
    assert names == expected
    assert {"omit", "inventory_hostname", "hostvars", "lookup", "query", "undef"} <= names


async def test_the_zygote_reports_the_reserved_names_itself(warm: WarmExecutor,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_child_process(python: str) -> frozenset[str]:
        raise AssertionError("a child process was started for the reserved names")

    monkeypatch.setattr(reserved, "read", no_child_process)
    assert {"omit", "inventory_hostname", "now"} <= await warm.reserved_names()


async def test_contract_bad_request_is_an_error_outcome(executor: Executor, tmp_path: Path) -> None:
    outcome = await executor.run(request_for(tmp_path, playbook=tmp_path / "missing.yml"), lambda e: None)
    assert outcome.status == "error" and outcome.error and "missing.yml" in outcome.error


async def _stopped_everything(executor: Executor, marker: str) -> None:
    """The run's module process must be gone too, not just the playbook process."""
    await _eventually_gone(marker)


async def _eventually_gone(marker: str) -> None:
    for _ in range(50):
        if not descendants_with(marker) and not _any_process_with(marker):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"processes with {marker} still running")


async def _eventually_running(marker: str) -> None:
    for _ in range(300):
        if _any_process_with(marker):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no process with {marker} started")


def _processes_with(marker: str) -> list[psutil.Process]:
    return [proc for proc in psutil.process_iter(["cmdline"])
            if any(marker in part for part in proc.info.get("cmdline") or ())]


def _any_process_with(marker: str) -> bool:
    return bool(_processes_with(marker))


# ---- warm only ------------------------------------------------------------------------------------


async def test_zygote_killed_mid_run_fails_in_flight_run_and_restarts(
    own_warm: WarmExecutor, tmp_path: Path
) -> None:
    marker = unique_sleep()
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - command: /bin/sleep {marker}
""")
    first_pid = own_warm.zygote_pid
    assert first_pid is not None
    task = asyncio.create_task(own_warm.run(request_for(tmp_path, playbook=pb), lambda e: None))
    await _eventually_running(marker)
    os.kill(first_pid, signal.SIGKILL)
    outcome = await asyncio.wait_for(task, 60)
    assert (outcome.status, outcome.error) == ("error", EXECUTOR_RESTARTED)
    assert (outcome.artifacts_dir / "status").read_text() == "error"

    ok = write(
        tmp_path / "ok.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=fine\n"
    )
    events: list[dict[str, Any]] = []
    outcome = await own_warm.run(request_for(tmp_path, playbook=ok), events.append)
    assert outcome.status == "successful"
    assert ok_messages(events) == ["fine"]
    assert own_warm.restarts == 1
    assert own_warm.zygote_pid not in (None, first_pid)
    await _eventually_gone(marker)


async def test_child_killed_is_an_error_and_zygote_keeps_serving(own_warm: WarmExecutor,
                                                                 tmp_path: Path) -> None:
    marker = unique_sleep()
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - command: /bin/sleep {marker}
""")
    zygote_pid = own_warm.zygote_pid
    assert zygote_pid is not None
    task = asyncio.create_task(own_warm.run(request_for(tmp_path, playbook=pb), lambda e: None))
    await _eventually_running(marker)
    (child,) = psutil.Process(zygote_pid).children()  # the run's forked child
    child.kill()
    outcome = await asyncio.wait_for(task, 60)
    assert outcome.status == "error"
    assert outcome.error == "the run's process was killed by signal 9"
    await _eventually_gone(marker)  # workers and the module die with the child
    assert own_warm.zygote_pid == zygote_pid and own_warm.restarts == 0

    ok = write(
        tmp_path / "ok.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=fine\n"
    )
    assert (await own_warm.run(request_for(tmp_path, playbook=ok), lambda e: None)).status == "successful"


@pytest.mark.parametrize("in_process", [True, False])
async def test_localhost_tasks_run_in_the_run_child_unless_switched_off(
        in_process: bool, tmp_path: Path) -> None:
    # a `pipe` lookup runs on the controller side of a task: its shell's parent is the process that ran
    # the task (the run child itself, or a worker forked for each task)
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug: msg="{{ lookup('pipe', 'echo $PPID') }}"
    - debug: msg="{{ lookup('pipe', 'echo $PPID') }}"
""")
    events: list[dict[str, Any]] = []
    async with started(WarmExecutor(max_workers=1, tasks_in_process=in_process)) as ex:
        outcome = await ex.run(request_for(tmp_path, playbook=pb), events.append)
    assert outcome.status == "successful"
    first, second = ok_messages(events)
    assert (first == second) is in_process


async def test_an_action_plugin_exiting_fails_its_task_not_the_run(
        warm: WarmExecutor, tmp_path: Path) -> None:
    # run in the run child (warm.tasks), a task whose action plugin calls sys.exit must become a failed
    # task result: the play goes on to its rescue and the run child reports as usual
    write(tmp_path / "action_plugins" / "exits.py", """
import sys
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        sys.exit(3)
""")
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - block:
        - name: exits
          exits:
      rescue:
        - debug: msg="rescued"
""")
    events: list[dict[str, Any]] = []
    outcome = await warm.run(request_for(tmp_path, playbook=pb), events.append)
    assert (outcome.status, outcome.rc) == ("successful", 0)
    (failed,) = [e for e in events if e["event"] == "runner_on_failed"]
    assert failed["event_data"]["task"] == "exits"
    assert "SystemExit" in json.dumps(failed["event_data"]["res"])
    assert "rescued" in ok_messages(events)


async def test_runs_share_one_zygote_without_leaking_state(warm: WarmExecutor, tmp_path: Path) -> None:
    """Per-run Ansible settings from the environment are re-applied in each child, not inherited."""
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug: msg="{{ lookup('config', 'DEFAULT_HASH_BEHAVIOUR') }}"
""")
    zygote_pid = warm.zygote_pid
    merged: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    env = {"ANSIBLE_GATHERING": "explicit"}
    await warm.run(request_for(tmp_path, playbook=pb, envvars={**env, "ANSIBLE_HASH_BEHAVIOUR": "merge"}),
                   merged.append)
    await warm.run(request_for(tmp_path, playbook=pb, envvars=env), plain.append)
    assert ok_messages(merged) == ["merge"]
    assert ok_messages(plain) == ["replace"]
    assert warm.zygote_pid == zygote_pid


async def test_close_stops_the_zygote_and_running_children(tmp_path: Path) -> None:
    ex = WarmExecutor()
    await ex.start()
    zygote_pid = ex.zygote_pid
    assert zygote_pid is not None
    marker = unique_sleep()
    pb = write(tmp_path / "pb.yml", f"- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                                    f"    - command: /bin/sleep {marker}\n")
    task = asyncio.create_task(ex.run(request_for(tmp_path, playbook=pb), lambda e: None))
    await _eventually_running(marker)
    await ex.close()
    outcome = await asyncio.wait_for(task, 30)
    assert outcome.status == "error"
    assert not psutil.pid_exists(zygote_pid) or psutil.Process(zygote_pid).status() == psutil.STATUS_ZOMBIE
    await _eventually_gone(marker)


async def test_on_event_exceptions_do_not_break_the_run(warm: WarmExecutor, tmp_path: Path) -> None:
    pb = write(
        tmp_path / "pb.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=x\n"
    )
    seen: list[str] = []

    def bad(ev: dict[str, Any]) -> None:
        seen.append(ev["event"])
        raise RuntimeError("callback bug")

    outcome = await warm.run(request_for(tmp_path, playbook=pb), bad)
    assert outcome.status == "successful"
    assert seen[-1] == "playbook_on_stats"


async def test_a_per_run_ansible_config_is_refused_clearly(warm: WarmExecutor, tmp_path: Path) -> None:
    cfg = write(tmp_path / "ansible.cfg", "[defaults]\nforks = 3\n")
    pb = write(
        tmp_path / "pb.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=x\n"
    )
    outcome = await warm.run(request_for(tmp_path, playbook=pb, envvars={"ANSIBLE_CONFIG": str(cfg)}),
                             lambda e: None)
    assert outcome.status == "error"
    assert outcome.error and "ANSIBLE_CONFIG" in outcome.error and "--executor runner" in outcome.error


async def test_a_zygote_that_cannot_start_gives_a_clear_error(tmp_path: Path) -> None:
    python = tmp_path / "python-without-ansible"
    python.write_text("#!/bin/sh\necho 'no ansible here' >&2\nexit 3\n")
    python.chmod(0o755)
    ex = WarmExecutor(python=str(python))
    try:
        with pytest.raises(RuntimeError, match=r"exited with 3 before it was ready.*--executor runner"):
            await ex.start()
        pb = write(tmp_path / "pb.yml", "- hosts: localhost\n  gather_facts: false\n  tasks: []\n")
        outcome = await ex.run(request_for(tmp_path, playbook=pb), lambda e: None)
        assert outcome.status == "error" and outcome.error and "before it was ready" in outcome.error
    finally:
        await ex.close()


async def test_idle_zygote_is_stopped_and_comes_back_on_the_next_run(tmp_path: Path) -> None:
    """An idle operator should cost only its own memory: the zygote goes after idle_timeout, and the
    next run starts a new one (not counted as a crash restart)."""
    executor = WarmExecutor(idle_timeout=0.5)
    ok = write(
        tmp_path / "ok.yml", "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug: msg=fine\n"
    )
    await executor.start()
    try:
        events: list[dict[str, Any]] = []
        assert (await executor.run(request_for(tmp_path, playbook=ok), events.append)).status == "successful"
        first = psutil.Process(executor._zygote.process.pid)  # type: ignore[union-attr]
        for _ in range(100):
            if executor.zygote_pid is None and not first.is_running():
                break
            await asyncio.sleep(0.1)
        assert executor.zygote_pid is None and not first.is_running()
        assert executor.idle_stops >= 1
        # the names are read without starting a zygote that no idle timer would stop again
        assert {"omit", "inventory_hostname"} <= await executor.reserved_names()
        assert executor.zygote_pid is None

        events = []
        assert (await executor.run(request_for(tmp_path, playbook=ok), events.append)).status == "successful"
        assert ok_messages(events) == ["fine"]
        assert executor.restarts == 0
    finally:
        await executor.close()


async def test_idle_timer_never_stops_a_zygote_with_a_run_in_flight(tmp_path: Path) -> None:
    executor = WarmExecutor(idle_timeout=0.3)
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - command: /bin/sleep 2
""")
    await executor.start()
    try:
        outcome = await executor.run(request_for(tmp_path, playbook=pb), lambda e: None)
        assert outcome.status == "successful"  # 2 s run, idle timeout 0.3 s: not interrupted
        assert executor.restarts == 0
    finally:
        await executor.close()
