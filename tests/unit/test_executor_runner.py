"""RunnerExecutor with real ansible-playbook runs (each ~1-2 s; kept few).

Streaming is proven without timing: the playbook waits for a file that the *test* writes only after it
has received an event of the same run, so the run can only succeed if events arrive while it runs and
the event loop keeps serving other tasks meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from executor_helpers import descendants_with, started, write

from ansible_operator.executors import make_executor
from ansible_operator.executors.base import RunRequest
from ansible_operator.executors.datadir import RUN_ID_ENV, new_run_id
from ansible_operator.executors.runner import RunnerExecutor, kill_leftovers

pytestmark = pytest.mark.ansible_versions  # also run on the lowest ansible-core (dev.sh test-ansible-low)

SECRET = "s3cr3t-Value-9f1c"


@pytest.fixture
async def executor():
    async with started(RunnerExecutor(max_workers=2)) as ex:
        yield ex


def request_for(tmp_path: Path, **kw: Any) -> RunRequest:
    rid = new_run_id()
    kw.setdefault("extra_vars", {})
    kw.setdefault("envvars", {"ANSIBLE_GATHERING": "explicit"})
    return RunRequest(run_id=rid, private_data_dir=tmp_path / "runs" / rid, **kw)




async def test_events_stream_in_order_on_the_loop_thread_and_secrets_stay_off_the_cmdline(
        executor: RunnerExecutor, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    pb = write(tmp_path / "pb.yml", f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      debug: msg="password is {{{{ password }}}}"
    - name: wait for the test to see the first event
      wait_for: path={flag} timeout=30
""")
    req = request_for(tmp_path, playbook=pb, extra_vars={"password": SECRET})
    loop_thread = threading.get_ident()
    events: list[dict[str, Any]] = []
    threads: set[int] = set()
    cmdlines: list[list[str]] = []
    first_ok = asyncio.Event()

    def on_event(ev: dict[str, Any]) -> None:
        events.append(ev)
        threads.add(threading.get_ident())
        if ev["event"] == "runner_on_ok" and not first_ok.is_set():
            cmdlines.extend(p.cmdline() for p in descendants_with(str(req.private_data_dir)))
            first_ok.set()

    async def ticker() -> None:  # an unrelated task: must keep running during the run
        await first_ok.wait()
        flag.write_text("go")

    tick = asyncio.create_task(ticker())
    outcome = await asyncio.wait_for(executor.run(req, on_event), 60)
    await tick

    assert outcome.status == "successful" and outcome.rc == 0 and outcome.error is None
    assert threads == {loop_thread}
    names = [e["event"] for e in events]
    assert names.index("playbook_on_start") < names.index("runner_on_ok") < names.index("playbook_on_stats")
    assert names[-1] == "playbook_on_stats"
    assert names.count("runner_on_ok") == 2
    counters = [e["counter"] for e in events]
    assert counters == sorted(counters)
    ok = next(e for e in events if e["event"] == "runner_on_ok")
    assert ok["event_data"]["task"] == "first" and ok["event_data"]["res"]["msg"] == f"password is {SECRET}"

    # the extra vars reached Ansible through the 0600 file, not the command line
    assert cmdlines and any(any("ansible-playbook" in part for part in c) for c in cmdlines)
    assert all(SECRET not in " ".join(c) for c in cmdlines)
    command = json.loads((outcome.artifacts_dir / "command").read_text())["command"]
    assert SECRET not in " ".join(command)
    assert f"@{req.private_data_dir / 'env' / 'extravars'}" in command
    assert (outcome.artifacts_dir / "status").read_text() == "successful"
    assert len(list((outcome.artifacts_dir / "job_events").glob("*.json"))) == len(events)


async def test_failing_task_is_failed_with_its_event_and_verbosity_passes_through(
        executor: RunnerExecutor, tmp_path: Path) -> None:
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: broken
      fail: msg="it broke"
""")
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, playbook=pb, verbosity=4), events.append)
    assert outcome.status == "failed" and outcome.rc == 2 and outcome.error is None
    failed = [e for e in events if e["event"] == "runner_on_failed"]
    assert len(failed) == 1 and failed[0]["event_data"]["res"]["msg"] == "it broke"
    assert events[-1]["event"] == "playbook_on_stats"
    command = json.loads((outcome.artifacts_dir / "command").read_text())["command"]
    assert "-vvvv" in command


async def test_role_by_absolute_path_gathers_facts_like_operator_sdk(
        executor: RunnerExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_GATHERING", raising=False)
    role = tmp_path / "roles" / "hello"
    write(role / "tasks" / "main.yml", "- name: greet\n  debug: msg=\"hello {{ who }}\"\n")
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, role=str(role), extra_vars={"who": "role"}, envvars={},
                                             verbosity=0), events.append)
    assert outcome.status == "successful"
    tasks = [e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok"]
    assert tasks == ["Gathering Facts", "greet"]
    assert next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "greet")[
        "event_data"]["res"]["msg"] == "hello role"
    command = json.loads((outcome.artifacts_dir / "command").read_text())["command"]
    assert not any(part.startswith("-v") for part in command)  # verbosity 0


async def test_role_found_in_roles_path_and_missing_role_fails_with_message(
        executor: RunnerExecutor, tmp_path: Path) -> None:
    roles = tmp_path / "shared-roles"
    write(roles / "hello" / "tasks" / "main.yml", "- name: greet\n  debug: msg=hi\n")
    events: list[dict[str, Any]] = []
    outcome = await executor.run(request_for(tmp_path, role="hello", roles_path=(roles,)), events.append)
    assert outcome.status == "successful"
    assert [e["event_data"]["task"] for e in events if e["event"] == "runner_on_ok"] == ["greet"]

    missing = await executor.run(request_for(tmp_path, role="nope", roles_path=(roles,)), lambda e: None)
    assert missing.status == "failed" and missing.rc not in (0, 2)
    assert missing.error and "nope" in missing.error


async def test_timeout_stops_the_run(executor: RunnerExecutor, tmp_path: Path) -> None:
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - command: sleep 37.25
""")
    req = request_for(tmp_path, playbook=pb, timeout=1)
    outcome = await asyncio.wait_for(executor.run(req, lambda e: None), 60)
    assert outcome.status == "timeout" and outcome.error and "timeout" in outcome.error
    assert (outcome.artifacts_dir / "status").read_text() == "timeout"
    assert descendants_with(str(req.private_data_dir)) == []
    assert descendants_with("37.25") == []


async def test_cancel_stops_the_run_and_reraises(executor: RunnerExecutor, tmp_path: Path) -> None:
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: started
      debug: msg=started
    - command: sleep 41.75
""")
    req = request_for(tmp_path, playbook=pb)
    started = asyncio.Event()
    seen_procs: list[psutil.Process] = []

    def on_event(ev: dict[str, Any]) -> None:
        if ev["event"] == "runner_on_start" and ev["event_data"].get("task") == "command":
            seen_procs.extend(descendants_with(str(req.private_data_dir)))
            started.set()

    task = asyncio.create_task(executor.run(req, on_event))
    await asyncio.wait_for(started.wait(), 60)
    assert seen_procs  # the ansible-playbook process was there
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)
    # when the awaiting task has ended, the run has ended too
    artifacts = req.private_data_dir / "artifacts" / req.run_id
    assert (artifacts / "status").read_text() == "canceled"
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in seen_procs)
    assert descendants_with(str(req.private_data_dir)) == []
    assert descendants_with("41.75") == []


async def test_close_cancels_runs_in_flight_and_a_queued_run_can_be_cancelled(tmp_path: Path) -> None:
    ex = RunnerExecutor(max_workers=1)
    await ex.start()
    pb = write(tmp_path / "pb.yml", """
- hosts: localhost
  gather_facts: false
  tasks:
    - command: sleep 43.5
""")
    req = request_for(tmp_path, playbook=pb)
    started = asyncio.Event()

    def on_event(ev: dict[str, Any]) -> None:
        if ev["event"] == "runner_on_start":
            started.set()

    task = asyncio.create_task(ex.run(req, on_event))
    await asyncio.wait_for(started.wait(), 60)
    # a second run waits for the only worker thread; cancelling it means it never starts
    queued_req = request_for(tmp_path, playbook=pb)
    queued = asyncio.create_task(ex.run(queued_req, on_event))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(queued, 60)
    assert not queued_req.private_data_dir.exists() and not task.done()
    await asyncio.wait_for(ex.close(), 60)
    outcome = await task
    assert outcome.status == "canceled"
    assert descendants_with("43.5") == []
    with pytest.raises(RuntimeError):
        await ex.run(req, on_event)


async def test_bad_request_is_an_error_outcome_not_an_exception(executor: RunnerExecutor,
                                                                tmp_path: Path) -> None:
    outcome = await executor.run(request_for(tmp_path, playbook=tmp_path / "missing.yml"), lambda e: None)
    assert outcome.status == "error" and outcome.rc is None
    assert outcome.error and "missing.yml" in outcome.error and "\n" not in outcome.error


async def test_run_requires_start(tmp_path: Path) -> None:
    ex = RunnerExecutor()
    with pytest.raises(RuntimeError, match="start"):
        await ex.run(request_for(tmp_path, playbook=tmp_path / "x.yml"), lambda e: None)
    await ex.close()  # closing an unstarted executor is fine


def test_make_executor() -> None:
    ex = make_executor("runner", max_workers=3)
    assert isinstance(ex, RunnerExecutor) and ex.name == "runner" and ex.max_workers == 3
    with pytest.raises(ValueError, match="unknown executor 'cold'"):
        make_executor("cold")


def test_kill_leftovers_also_kills_what_forked_during_its_scan() -> None:
    """A run's process that keeps forking (a module starting commands) while the leftovers are killed: a
    child forked after the scan read the process table survived one pass (seen as a `sleep` still running
    after a timed-out run, ansible-core 2.21, CI). The scans repeat until one finds nothing."""
    run_id = new_run_id()
    env = {**os.environ, RUN_ID_ENV: run_id}

    def with_run_id() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get(RUN_ID_ENV) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    for _ in range(3):  # each round is a fresh race
        forker = subprocess.Popen(["/bin/sh", "-c", "while :; do /bin/sleep 1000 & /bin/sleep 0.002; done"],
                                  env=env, start_new_session=True)
        try:
            while len(psutil.Process(forker.pid).children()) < 20:
                pass  # busy: the forker must be forking when the kill starts
            assert kill_leftovers(run_id) >= 20
            forker.wait(5)  # already reaped by kill_leftovers' wait (it is our child): no status here
            assert with_run_id() == []
        finally:
            for proc in with_run_id():
                proc.kill()
