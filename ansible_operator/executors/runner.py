"""The plain executor: ``ansible_runner.run`` (ansible-runner's Python API) in a worker thread.

Why a thread and not ``run_async``/a subprocess of our own: ``ansible_runner.run`` is blocking and drives
ansible-playbook through pexpect, but it gives us the three hooks we need — ``event_handler`` (every
event, as it is parsed from the live output), ``cancel_callback`` (polled while the child runs) and the
``timeout`` setting. Running it in a dedicated ``ThreadPoolExecutor`` keeps the event loop free; events
are handed to the loop with ``call_soon_threadsafe`` so ``on_event`` always runs on the loop thread, in
emission order, while the run is still going.

Process lifetime: ansible-playbook runs under :mod:`~ansible_operator.executors.guard`, a sub-reaper that
kills every process of the run (module processes, ``shell`` children, their daemonised grandchildren) when
the operator dies, even by SIGKILL.

Cancellation: cancelling the task awaiting :meth:`RunnerExecutor.run` sets a flag that
``cancel_callback`` reports to ansible-runner, which SIGKILLs ansible-playbook's process group. The
awaiting coroutine waits until ``ansible_runner.run`` has returned — so nothing of the run is left
running — and only then re-raises ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import os
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Sequence

from ansible_operator.executors import reserved
from ansible_operator.executors.base import EventCallback, RunOutcome, RunRequest
from ansible_operator.executors.datadir import RUN_ID_ENV, prepare
from ansible_operator.executors.failure import one_line as _one_line
from ansible_operator.executors.failure import stdout_error

log = logging.getLogger(__name__)

__all__ = ["RunnerExecutor"]

_RUNNER_STATUSES = {"successful", "failed", "timeout", "canceled"}
# How often ansible-runner's pexpect loop wakes up to poll cancel_callback and the job timeout
# (ansible-runner's default is 5 s, which would make cancel and timeout that slow).
DEFAULT_POLL_INTERVAL = 0.25


def kill_leftovers(run_id: str, wait: float = 5.0) -> int:
    """SIGKILL every process still carrying this run's id in its environment; returns how many.

    ansible-runner kills ansible-playbook's process group on cancel/timeout, but processes Ansible starts
    in sessions or groups of their own (module invocations through the local connection; 2.21's workers)
    survive, re-parented to init. They all inherit ``RUN_ID_ENV`` from the run's environment, which is what
    we look for. One pass is not enough: a process may fork after the scan read the process table (a module
    starting its command), so scans repeat until one finds nothing, each after the killed ones are gone, for
    up to ``wait`` seconds, so a run that ended has no process left running.
    """
    import psutil  # noqa: PLC0415 - only on the rare stop path

    me = os.getpid()
    deadline = time.monotonic() + wait
    total = 0
    alive: list[psutil.Process] = []
    while True:
        killed: list[psutil.Process] = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid == me:
                continue
            try:
                if proc.environ().get(RUN_ID_ENV) == run_id:
                    proc.kill()
                    killed.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        total += len(killed)
        if not killed:
            break
        alive = _wait_dead(killed, deadline)
        if time.monotonic() >= deadline:
            break
    if total:
        log.info("run %s: killed %d leftover process(es) after stop%s", run_id, total,
                 f"; {len(alive)} still there after {wait:g}s" if alive else "")
    return total


def _wait_dead(procs: list[Any], deadline: float) -> list[Any]:
    """Wait until each of these ``psutil.Process`` is gone or a zombie (dead: its parent, often init, reaps
    it when it will; ``psutil.wait_procs`` would wait on it until the deadline); the live ones at the
    deadline."""
    import psutil  # noqa: PLC0415 - only on the rare stop path

    def running(proc: Any) -> bool:
        try:
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    pending = [proc for proc in procs if running(proc)]
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        pending = [proc for proc in pending if running(proc)]
    return pending


class RunnerExecutor:
    """Runs each request with ``ansible_runner.run`` in its own worker thread (at most ``max_workers``)."""

    name = "runner"

    def __init__(self, *, max_workers: int = 8, poll_interval: float = DEFAULT_POLL_INTERVAL,
                 ansible_args: Sequence[str] = ()) -> None:
        """``ansible_args``: extra ansible-playbook arguments for every run (``--ansible-args``)."""
        if max_workers < 1:
            raise ValueError(f"RunnerExecutor max_workers must be >= 1 (got {max_workers})")
        self.max_workers = max_workers
        self.poll_interval = poll_interval
        self.ansible_args = tuple(ansible_args)
        self._pool: ThreadPoolExecutor | None = None
        self._active: set[threading.Event] = set()

    async def start(self) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="ansible-runner")

    async def close(self) -> None:
        """Cancel runs still going and wait for their threads to end."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for flag in list(self._active):
            flag.set()
        await asyncio.get_running_loop().run_in_executor(None, partial(pool.shutdown, wait=True))

    async def reserved_names(self) -> frozenset[str]:
        """Read in a child process of this interpreter, ansible-playbook's."""
        return await reserved.read(sys.executable)

    async def run(self, request: RunRequest, on_event: EventCallback) -> RunOutcome:
        if self._pool is None:
            raise RuntimeError("RunnerExecutor.run() called before start() (or after close())")
        loop = asyncio.get_running_loop()
        cancel = threading.Event()

        def deliver(event: dict[str, Any]) -> None:  # on the loop thread
            try:
                on_event(event)
            except Exception:
                log.exception("run %s: on_event callback raised; event %s dropped for it",
                              request.run_id, event.get("event"))

        def emit(event: dict[str, Any]) -> bool:  # on the runner thread
            try:
                # A copy: ansible-runner serializes its dict to job_events/ right after we return.
                loop.call_soon_threadsafe(deliver, copy.deepcopy(event))
            except RuntimeError:  # loop closed: nobody is listening any more
                pass
            return True  # keep writing job_events/*.json

        self._active.add(cancel)
        work = self._pool.submit(self._run_blocking, request, emit, cancel)
        fut = asyncio.wrap_future(work, loop=loop)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            cancel.set()
            work.cancel()  # still waiting for a free worker thread: it never starts
            while not fut.done():  # wait for the run to really stop, even if cancelled again
                try:
                    await asyncio.wait([fut])
                except asyncio.CancelledError:
                    continue
            raise
        finally:
            self._active.discard(cancel)

    def _run_blocking(self, request: RunRequest, emit: Any, cancel: threading.Event) -> RunOutcome:
        artifacts_dir = request.private_data_dir / "artifacts" / request.run_id
        try:
            prepared = prepare(request)
        except Exception as e:  # bad request or unwritable dir: nothing ran
            return RunOutcome(status="error", rc=None, artifacts_dir=artifacts_dir,
                              error=_one_line(f"cannot prepare run: {e}"))
        if cancel.is_set():
            return RunOutcome(status="canceled", rc=None, artifacts_dir=prepared.artifacts_dir)

        import ansible_runner  # noqa: PLC0415 - heavy import, only paid by the thread that runs

        timeout = max(1, math.ceil(request.timeout)) if request.timeout else None  # runner truncates to int
        # ansible-playbook under the guard (executors/guard.py): every process of the run dies with the
        # operator, even on SIGKILL. With ``binary`` ansible-runner appends no playbook: cmdline carries it.
        guarded = ["-m", "ansible_operator.executors.guard", str(os.getpid()), "--",
                   str(Path(sys.executable).with_name("ansible-playbook")), str(prepared.playbook),
                   *self.ansible_args]
        try:
            r = ansible_runner.run(
                private_data_dir=str(prepared.private_data_dir),
                binary=sys.executable,
                inventory=str(prepared.inventory),
                ident=request.run_id,
                verbosity=request.verbosity,
                envvars=dict(prepared.env),
                settings={"pexpect_timeout": self.poll_interval},
                cmdline=shlex.join(guarded),
                timeout=timeout,
                quiet=True,
                event_handler=emit,
                cancel_callback=cancel.is_set,
            )
        except Exception as e:
            log.exception("run %s: ansible-runner raised", request.run_id)
            return RunOutcome(status="error", rc=None, artifacts_dir=prepared.artifacts_dir,
                              error=_one_line(f"ansible-runner: {type(e).__name__}: {e}"))

        status, rc = r.status, r.rc
        if status in ("canceled", "timeout"):
            kill_leftovers(request.run_id)
        if status not in _RUNNER_STATUSES:
            return RunOutcome(status="error", rc=rc, artifacts_dir=prepared.artifacts_dir,
                              error=_one_line(f"ansible-runner ended with status {status!r}"))
        error: str | None = None
        if status == "timeout":
            error = f"run exceeded its timeout of {request.timeout:g}s and was stopped"
        elif status == "failed" and rc not in (0, 2):
            # rc 2 = a task failed (the events say which); anything else failed outside any task.
            error = stdout_error(prepared.artifacts_dir) or f"ansible-playbook exited with rc {rc}"
        return RunOutcome(status=status, rc=rc, artifacts_dir=prepared.artifacts_dir, error=error)
