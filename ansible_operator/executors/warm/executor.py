"""The warm executor: runs through a pre-imported Ansible "zygote" process that forks one child per run.

A plain ``ansible-playbook`` spends most of a short operator run importing Ansible and loading plugins
(~0.55 s of ~1.2 s here). The zygote (:mod:`ansible_operator.executors.warm.zygote`, a separate interpreter
started with ``asyncio.create_subprocess_exec``: the operator's own threaded asyncio process is never
forked) does that once; each run is a ``fork()`` of it, so a run starts executing tasks at once and shares
the imported code copy-on-write. Runs produce the same events and artifacts layout as the ``runner``
executor (ansible-runner's own callback plugin and event filter are used inside the child).

Failure handling: a child that dies without finishing -> ``error``; a timeout kills the child's whole
process tree -> ``timeout``; cancelling the awaiting task kills it -> ``canceled`` (and re-raises); if the
zygote itself dies, its in-flight runs end as ``error`` / "executor restarted" (the caller requeues them)
and a new zygote is started.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from ansible_operator.executors import ansible_compat, reserved
from ansible_operator.executors.base import EventCallback, RunOutcome, RunRequest, RunStatus
from ansible_operator.executors.failure import stdout_error
from ansible_operator.executors.lifetime import kill_group
from ansible_operator.executors.warm.fast_modules import DEFAULT_FAST_MODULE_PREFIXES
from ansible_operator.executors.warm.protocol import REMOVE_CWD, RunSpec, encode

__all__ = ["WarmExecutor", "check_ansible_core_version"]

log = logging.getLogger(__name__)

_RUNNER_KILLED_RC = 254  # what ansible-runner records as rc for timed-out and canceled runs
_READY_TIMEOUT = 120.0  # importing Ansible + kubernetes on a loaded 2-core machine
_KILL_WAIT = 15.0
_LINE_LIMIT = 256 * 1024 * 1024  # one event line may carry a large module result
EXECUTOR_RESTARTED = "executor restarted"
FAST_PATH_ENV = "ANSIBLE_OPERATOR_WARM_FAST_PATH"
TASKS_IN_PROCESS_ENV = "ANSIBLE_OPERATOR_WARM_TASKS_IN_PROCESS"
MODULES_IN_PROCESS_ENV = "ANSIBLE_OPERATOR_WARM_MODULES_IN_PROCESS"


def _switch(env: str) -> bool:
    """An on-by-default switch from the environment: off for ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get(env, "").strip().lower() not in ("0", "false", "no", "off")


def check_ansible_core_version() -> None:
    """Refuse early, with a pointer to the fallback, when ansible-core is not a supported version."""
    try:
        installed = metadata.version("ansible-core")
    except metadata.PackageNotFoundError:
        raise RuntimeError("the warm executor needs ansible-core, which is not installed;"
                           " use --executor runner") from None
    ansible_compat.check(installed)


@dataclass
class _Run:
    run_id: str
    on_event: EventCallback
    done: asyncio.Future[None]
    pid: int | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    restarted: bool = False


@dataclass
class _Zygote:
    process: asyncio.subprocess.Process
    ready: asyncio.Future[dict[str, Any]]
    runs: dict[str, _Run] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    alive: bool = True

    def send(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if not self.alive or stdin is None or stdin.is_closing():
            raise ConnectionError("the zygote is not running")
        stdin.write(encode(message))


class WarmExecutor:
    """:class:`~ansible_operator.executors.base.Executor` backed by a forking zygote process."""

    name = "warm"

    def __init__(self, *, max_workers: int = 8, python: str = sys.executable,
                 fast_modules: Sequence[str] = DEFAULT_FAST_MODULE_PREFIXES,
                 idle_timeout: float | None = None, ansible_args: Sequence[str] = (),
                 fast_path: bool | None = None, tasks_in_process: bool | None = None,
                 modules_in_process: bool | None = None) -> None:
        """``ansible_args``: extra ansible-playbook arguments for every run (``--ansible-args``).

        ``fast_modules``: module FQCN prefixes (default ``kubernetes.core.``) whose tasks run in a fork
        of the already-imported worker instead of a fresh interpreter; ``()`` turns that off.

        ``idle_timeout``: stop the zygote after this many seconds without runs, and start it again (about
        a second) on the next run; an idle operator then costs only its own memory. None keeps it forever.

        ``fast_path``: the run child's fast path (waiting for task results on a wake-up instead of
        Ansible's 1 ms polling loop, see docs/explanation/warm-executor.md); None (default) reads
        ``ANSIBLE_OPERATOR_WARM_FAST_PATH`` (on unless ``0``, ``false``, ``no`` or ``off``).

        ``tasks_in_process``: run localhost tasks in the run child instead of a forked Ansible worker
        (``warm.tasks``; part of the fast path, never on without it); None (default) reads
        ``ANSIBLE_OPERATOR_WARM_TASKS_IN_PROCESS`` the same way.

        ``modules_in_process``: run the ``fast_modules`` in the process that runs their task instead of a
        fork of it (``warm.inline_modules``; part of the fast path); None (default) reads
        ``ANSIBLE_OPERATOR_WARM_MODULES_IN_PROCESS`` the same way.
        """
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1 (got {max_workers})")
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive (got {idle_timeout})")
        self._idle_timeout = idle_timeout
        self._active = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self.idle_stops = 0
        """How many times the zygote was stopped for being idle (not counted in ``restarts``)."""
        self._python = python
        self._fast_modules = [str(p) for p in fast_modules]
        self._ansible_args = [str(a) for a in ansible_args]
        if fast_path is None:
            fast_path = _switch(FAST_PATH_ENV)
        self.fast_path = fast_path
        if tasks_in_process is None:
            tasks_in_process = _switch(TASKS_IN_PROCESS_ENV)
        self.tasks_in_process = fast_path and tasks_in_process
        if modules_in_process is None:
            modules_in_process = _switch(MODULES_IN_PROCESS_ENV)
        self.modules_in_process = fast_path and modules_in_process
        self._slots = asyncio.Semaphore(max_workers)
        self._zygote: _Zygote | None = None
        self._spawn_lock = asyncio.Lock()
        self._closing = False
        self._no_restart = False
        self._restarts = 0
        self._workdir: str | None = None

    @property
    def restarts(self) -> int:
        """How many times the zygote died and was replaced (for metrics and tests)."""
        return self._restarts

    @property
    def zygote_pid(self) -> int | None:
        return self._zygote.process.pid if self._zygote and self._zygote.alive else None

    async def start(self) -> None:
        check_ansible_core_version()
        self._closing = False
        await self._ensure_zygote()
        self._arm_idle_timer()

    async def reserved_names(self) -> frozenset[str]:
        """As the running zygote read them when it was ready (it has ansible-core imported); else from a
        child process of its interpreter: a zygote stopped while idle is not started for a list of names."""
        zygote = self._zygote
        ready = zygote.ready if zygote is not None and zygote.alive else None
        if ready is not None and ready.done() and not ready.cancelled() and ready.exception() is None:
            names = ready.result().get("reserved_names")
            if names:
                return reserved.parse(names, self._python)
        return await reserved.read(self._python)

    async def close(self) -> None:
        self._closing = True
        self._cancel_idle_timer()
        zygote, self._zygote = self._zygote, None
        try:
            if zygote is not None:
                await self._stop_zygote(zygote)
        finally:
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def stop_restarting(self) -> None:
        """The operator is shutting down: a zygote that dies from now on is not replaced (with SIGTERM sent
        to the whole process group it gets one too). Runs in flight keep the zygote they have."""
        self._no_restart = True

    async def _stop_zygote(self, zygote: _Zygote) -> None:
        if zygote.alive and zygote.process.stdin is not None:
            try:
                zygote.send({"op": "exit"})
                zygote.process.stdin.close()
            except (ConnectionError, RuntimeError):
                pass
        try:
            async with asyncio.timeout(_KILL_WAIT):
                await zygote.process.wait()
        except TimeoutError:
            _kill_quietly(zygote.process)
            await zygote.process.wait()
        if zygote.reader is not None:
            await asyncio.gather(zygote.reader, return_exceptions=True)

    # -- zygote lifecycle ---------------------------------------------------------------------------
    async def _ensure_zygote(self) -> _Zygote:
        async with self._spawn_lock:
            if self._closing:
                raise RuntimeError("the warm executor is closed")
            zygote = self._zygote
            if zygote is None or not zygote.alive:
                zygote = await self._spawn()
                self._zygote = zygote
        await asyncio.shield(zygote.ready)  # raises the zygote's start-up error, if any
        if not zygote.alive:
            raise RuntimeError("the zygote exited right after starting")
        return zygote

    async def _spawn(self) -> _Zygote:
        # An empty private working directory: like ansible-playbook under ansible-runner (cwd = the run's
        # project dir), the zygote must not pick up an ansible.cfg from the operator's cwd at import.
        if self._workdir is None or not os.path.isdir(self._workdir):
            self._workdir = tempfile.mkdtemp(prefix="ansible-operator-zygote-")
        process = await asyncio.create_subprocess_exec(
            self._python, "-m", "ansible_operator.executors.warm.zygote", REMOVE_CWD,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            limit=_LINE_LIMIT, cwd=self._workdir,
        )
        zygote = _Zygote(process=process, ready=asyncio.get_running_loop().create_future())
        zygote.reader = asyncio.create_task(self._read(zygote), name=f"warm-zygote-{process.pid}")
        try:
            async with asyncio.timeout(_READY_TIMEOUT):
                info = await asyncio.shield(zygote.ready)
        except BaseException:
            _kill_quietly(process)
            await process.wait()
            raise
        log.info("warm executor: zygote %s ready (ansible-core %s, preload %.2fs)",
                 info.get("pid"), info.get("ansible_core"), info.get("preload_seconds", 0.0))
        return zygote

    async def _read(self, zygote: _Zygote) -> None:
        stdout = zygote.process.stdout
        assert stdout is not None
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                self._dispatch(zygote, json.loads(line))
        except asyncio.CancelledError:
            # The loop is shutting down without close(): do not leave the zygote (or a wait) behind.
            zygote.alive = False
            _kill_quietly(zygote.process)
            raise
        except Exception:  # a protocol bug must not leave runs hanging: treat as a dead zygote
            log.exception("warm executor: reading from the zygote failed")
            _kill_quietly(zygote.process)
        await self._zygote_gone(zygote)

    def _dispatch(self, zygote: _Zygote, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "ready":
            if not zygote.ready.done():
                zygote.ready.set_result(message)
            return
        if op == "fatal":
            if not zygote.ready.done():
                zygote.ready.set_exception(
                    RuntimeError(f"warm executor cannot start: {message.get('error')}")
                )
            return
        run = zygote.runs.get(message.get("id", ""))
        if run is None:
            return
        if op == "event":
            try:
                run.on_event(message["event"])
            except Exception:
                log.exception("warm executor: event callback failed for run %s", run.run_id)
        elif op == "started":
            run.pid = message.get("pid")
        elif op == "result":
            run.result = message
        elif op == "error":
            run.error = str(message.get("error"))
        elif op == "exited":
            run.exit_code = message.get("exit_code")
            run.signal = message.get("signal")
            zygote.runs.pop(run.run_id, None)
            if not run.done.done():
                run.done.set_result(None)

    async def _zygote_gone(self, zygote: _Zygote) -> None:
        zygote.alive = False
        try:
            async with asyncio.timeout(_KILL_WAIT):
                code = await zygote.process.wait()
        except TimeoutError:  # closed its stdout but lives on: it cannot serve any more
            _kill_quietly(zygote.process)
            code = await zygote.process.wait()
        if not zygote.ready.done():
            zygote.ready.set_exception(
                RuntimeError(
                    f"warm executor: the zygote exited with {code} before it was"
                    " ready (see its stderr); use --executor runner to avoid it"
                )
            )
        in_flight = list(zygote.runs.values())
        zygote.runs.clear()
        for run in in_flight:
            run.restarted = True  # its child died with the zygote (PR_SET_PDEATHSIG), workers with it
            if run.pid is not None:
                kill_group(run.pid)  # module processes are orphaned, still in the run's group
            if not run.done.done():
                run.done.set_result(None)
        if self._closing or self._no_restart or self._zygote is not zygote:
            return
        self._restarts += 1
        log.warning("warm executor: zygote exited with %s; %d in-flight run(s) failed; restarting",
                    code, len(in_flight))
        # Replace it now so the next run does not pay the start-up; failures surface on that next run.
        task = asyncio.create_task(self._restart_quietly())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _restart_quietly(self) -> None:
        try:
            await self._ensure_zygote()
        except Exception as exc:
            log.error("warm executor: restarting the zygote failed: %s", exc)

    # -- idle shutdown ------------------------------------------------------------------------------
    def _cancel_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _arm_idle_timer(self) -> None:
        if self._idle_timeout is None or self._active or self._closing:
            return
        self._cancel_idle_timer()
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(self._idle_timeout,
                                           lambda: loop.create_task(self._stop_if_idle()))

    async def _stop_if_idle(self) -> None:
        async with self._spawn_lock:  # a run that wants the zygote waits for us, then spawns a new one
            zygote = self._zygote
            if self._active or self._closing or zygote is None or zygote.runs:
                return
            self._zygote = None  # so _zygote_gone treats the exit as intended, not as a crash
            self.idle_stops += 1
            log.info("warm executor: no runs for %gs, stopping the zygote until the next run",
                     self._idle_timeout)
            await self._stop_zygote(zygote)

    # -- runs ---------------------------------------------------------------------------------------
    async def run(self, request: RunRequest, on_event: EventCallback) -> RunOutcome:
        self._active += 1  # before any await: an idle stop never races a run that has begun
        self._cancel_idle_timer()
        try:
            return await self._run(request, on_event)
        finally:
            self._active -= 1
            self._arm_idle_timer()

    async def _run(self, request: RunRequest, on_event: EventCallback) -> RunOutcome:
        from ansible_operator.executors import datadir

        artifacts_dir = request.private_data_dir / "artifacts" / request.run_id
        try:
            prepared = await asyncio.to_thread(datadir.prepare, request)
        except Exception as exc:  # bad request or unwritable dir: nothing ran
            return RunOutcome(status="error", rc=None, artifacts_dir=artifacts_dir,
                              error=f"cannot prepare run: {exc}")
        artifacts_dir = prepared.artifacts_dir
        spec: RunSpec = {
            "ident": request.run_id,
            "private_data_dir": str(prepared.private_data_dir),
            "cwd": str(prepared.private_data_dir / "project"),
            "playbook": str(prepared.playbook),
            "inventory": str(prepared.inventory),
            "extravars_file": str(prepared.extravars_file),
            "artifacts_dir": str(artifacts_dir),
            "env": dict(prepared.env),
            "verbosity": request.verbosity,
            "fast_modules": self._fast_modules,
            "ansible_args": self._ansible_args,
            "fast_path": self.fast_path,
            "tasks_in_process": self.tasks_in_process,
            "modules_in_process": self.modules_in_process,
        }
        async with self._slots:
            try:
                zygote = await self._ensure_zygote()
            except Exception as exc:
                return RunOutcome(status="error", rc=None, artifacts_dir=artifacts_dir, error=str(exc))
            run = _Run(run_id=request.run_id, on_event=on_event,
                       done=asyncio.get_running_loop().create_future())
            if request.run_id in zygote.runs:
                return RunOutcome(status="error", rc=None, artifacts_dir=artifacts_dir,
                                  error=f"run id {request.run_id} is already running")
            zygote.runs[request.run_id] = run
            try:
                zygote.send({"op": "run", "id": request.run_id, "spec": spec})
            except ConnectionError:
                zygote.runs.pop(request.run_id, None)
                return RunOutcome(
                    status="error", rc=None, artifacts_dir=artifacts_dir, error=EXECUTOR_RESTARTED
                )
            try:
                async with asyncio.timeout(request.timeout):
                    await asyncio.shield(run.done)
            except TimeoutError:
                await self._stop(zygote, run)
                return _finish(artifacts_dir, "timeout", _RUNNER_KILLED_RC,
                               f"run exceeded its timeout of {request.timeout:g}s and was stopped")
            except asyncio.CancelledError:
                await self._stop(zygote, run)
                _finish(artifacts_dir, "canceled", _RUNNER_KILLED_RC, None)
                raise
        return _outcome(run, artifacts_dir)

    async def _stop(self, zygote: _Zygote, run: _Run) -> None:
        """Kill the run's process tree and wait (bounded) until the zygote reports it gone."""
        if run.done.done():
            return
        try:
            zygote.send({"op": "kill", "id": run.run_id})
        except ConnectionError:
            pass
        try:
            async with asyncio.timeout(_KILL_WAIT):
                await asyncio.shield(run.done)
        except TimeoutError:
            log.error("warm executor: run %s did not exit %ss after SIGKILL", run.run_id, _KILL_WAIT)


def _outcome(run: _Run, artifacts_dir: Path) -> RunOutcome:
    if run.restarted:
        return _finish(artifacts_dir, "error", None, EXECUTOR_RESTARTED)
    if run.result is not None:
        status = run.result.get("status")
        rc = run.result.get("rc")
        if status in ("successful", "failed") and isinstance(rc, int):
            error = None
            if status == "failed" and rc not in (0, 2):
                # as the runner executor: rc 2 = a task failed (the events say which); anything else
                # failed outside any task (syntax error, role not found...): name it from the output.
                error = stdout_error(artifacts_dir) or f"ansible-playbook exited with rc {rc}"
            return RunOutcome(status=status, rc=rc, artifacts_dir=artifacts_dir, error=error)
    if run.error is not None:
        return _finish(artifacts_dir, "error", None, f"run failed inside the warm executor: {run.error}")
    if run.signal is not None:
        how = f"was killed by signal {run.signal}"
    elif run.pid is None:
        how = "could not be started"
    else:
        how = f"exited with code {run.exit_code} before finishing"
    return _finish(artifacts_dir, "error", None, f"the run's process {how}")


def _finish(artifacts_dir: Path, status: RunStatus, rc: int | None, error: str | None) -> RunOutcome:
    """Record a run the child could not finish itself, in ansible-runner's ``status``/``rc`` files."""
    try:
        artifacts_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, value in (("status", status), ("rc", "" if rc is None else str(rc))):
            fd = os.open(artifacts_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(value)
    except OSError as exc:
        log.warning("warm executor: could not write %s/status: %s", artifacts_dir, exc)
    return RunOutcome(status=status, rc=rc, artifacts_dir=artifacts_dir, error=error)


def _kill_quietly(process: asyncio.subprocess.Process) -> None:
    try:
        process.kill()
    except ProcessLookupError:
        pass
