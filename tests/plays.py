"""Tasks run as a play and their registered results read back: the tests of modules (kubernetes.core's
through the owner proxy, ansible_operator.util's against an API server).

A play runs on the warm executor, as an operator runs it (:func:`run_on`), or as a new ``ansible-playbook``
(:func:`run_ansible_playbook`): a process per play and one per module task, the way ansible-runner runs
them, ~1 CPU s a task against ~0.1 on the warm executor. Either way the play ends with a task writing
every registered result to a JSON file, which the test reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Coroutine, Iterator, Mapping, TypeVar

import yaml

from ansible_operator import collections as aocollections
from ansible_operator.executors.base import RunOutcome, RunRequest
from ansible_operator.executors.datadir import new_run_id
from ansible_operator.executors.warm.executor import WarmExecutor
from tests.unit.executor_helpers import started

T = TypeVar("T")
VENV_BIN = Path(sys.executable).parent


def write_play(directory: Path, name: str, tasks: list[dict[str, Any]], **play: Any) -> tuple[Path, Path]:
    """``directory/name.yml``: ``tasks`` on localhost (no facts; ``play`` adds keywords such as
    ``collections``), then a task writing each task's ``register`` to ``directory/name.json``, even in
    check mode. Returns (playbook, results file)."""
    registered = [t["register"] for t in tasks if "register" in t]
    out = directory / f"{name}.json"
    dump = {"copy": {"dest": str(out), "content": "{{ {" + ", ".join(f"'{r}': {r}" for r in registered)
                     + "} | to_json }}"}, "check_mode": False}
    playbook = directory / f"{name}.yml"
    directory.mkdir(parents=True, exist_ok=True)
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, **play,
                                         "tasks": tasks + [dump]}], sort_keys=False))
    return playbook, out


def warm_executor() -> AbstractAsyncContextManager[WarmExecutor]:
    """A started warm executor (one run at a time), closed on the way out."""
    return started(WarmExecutor(max_workers=1))


async def run_file(executor: WarmExecutor, directory: Path, playbook: Path, extra_vars: Mapping[str, Any],
                   envvars: Mapping[str, str], timeout: float = 240) -> tuple[RunOutcome, str]:
    """``playbook`` as a run of ``executor`` (started) with ``extra_vars``, ``envvars`` and our collections
    on its path, its data under ``directory``; the outcome and the run's output."""
    rid = new_run_id()
    events: list[dict[str, Any]] = []
    outcome = await asyncio.wait_for(executor.run(
        RunRequest(run_id=rid, private_data_dir=directory / rid, playbook=playbook, extra_vars=extra_vars,
                   envvars={"ANSIBLE_NOCOLOR": "1", **envvars},
                   collections_path=tuple(aocollections.paths())),
        events.append), timeout)
    return outcome, "".join(str(e.get("stdout", "")) for e in events)


async def run_on(executor: WarmExecutor, directory: Path, name: str, tasks: list[dict[str, Any]],
                 envvars: Mapping[str, str], timeout: float = 240, **play: Any) -> dict[str, Any]:
    """``tasks`` as a run of ``executor`` (:func:`run_file`); returns the registered results. The run must
    succeed (``ignore_errors`` for tasks meant to fail)."""
    playbook, out = write_play(directory, name, tasks, **play)
    outcome, output = await run_file(executor, directory, playbook, {}, envvars, timeout)
    assert outcome.status == "successful", (outcome, output[-5000:])
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def run_ansible_playbook(directory: Path, name: str, tasks: list[dict[str, Any]], envvars: Mapping[str, str],
                         check: bool = False, timeout: float = 180, **play: Any) -> dict[str, Any]:
    """``tasks`` run by ``ansible-playbook`` (``--check`` when ``check``) with ``envvars`` and our
    collections on its path; returns the registered results."""
    playbook, out = write_play(directory, name, tasks, **play)
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(p) for p in aocollections.paths()),
        "ANSIBLE_LOCAL_TEMP": str(directory / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        **envvars,
    })
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)]
    if check:
        cmd.append("--check")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


class LoopThread:
    """An event loop in a thread of its own, for synchronous tests that share async things (a started
    warm executor: one zygote for a module's tests instead of one per test)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()


def warm_executor_in_thread() -> Iterator[tuple[LoopThread, WarmExecutor]]:
    """The body of a module-scoped fixture: a started warm executor on a :class:`LoopThread`, closed at
    the end."""
    thread = LoopThread()
    context = warm_executor()
    try:
        executor = thread.run(context.__aenter__())
        try:
            yield thread, executor
        finally:
            thread.run(context.__aexit__(None, None, None))
    finally:
        thread.stop()
