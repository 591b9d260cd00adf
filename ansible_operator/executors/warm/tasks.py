"""Localhost tasks without a worker fork: Ansible's ``TaskExecutor`` in the run child itself.

For every task and host, Ansible's strategy forks the controller into a ``WorkerProcess`` that runs the
``TaskExecutor`` and sends the result back through the results queue. The fork buys two things: hosts
run in parallel (up to ``forks``), and whatever the task executor changes in the controller's objects
dies with the worker (2.16 - 2.18 template the task's fields in place, 2.21 squashes it, the worker
empties ``host.vars``, the executor writes ``ansible_search_path`` and loop variables into the task
vars). For an operator's play (one host, ``localhost``) the first buys nothing, and the second is had
with copies; the fork itself (a ~60-100 MB process: copy-on-write faults, bootstrap, exit) was ~14 % of
a warm Memcached run's CPU, and four of the ~9 processes forked per Memcached run.

So for a host named like Ansible's implicit localhost (``C.LOCALHOST``), ``WorkerProcess.start`` runs the
version's own ``WorkerProcess._run`` synchronously in the run child, on a copy of the worker holding
copies of the host, the task and the task vars. The result goes through the same results queue, so the
strategy, the callbacks and the events see exactly what a worker would have sent. Tasks of other hosts
(a playbook that adds hosts) start a worker the normal way and keep their parallelism.

What differs from a worker: a task's ``timeout`` alarm and any prompt run in the run child (its stdin is
``/dev/null`` as a worker's is); an action plugin's stray ``print`` reaches the run's stdout (a 2.19
worker captures it and warns); an exception escaping the task executor becomes a failed task result
instead of a dead worker. Fast modules then run in the run child too (``warm.inline_modules``; in a fork
of it with ``ANSIBLE_OPERATOR_WARM_MODULES_IN_PROCESS=false``); other modules are executed by the connection
as usual, in processes of their own.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

from ansible_operator.executors import ansible_compat


def _in_process(worker: Any) -> bool:
    from ansible import constants as C

    host = getattr(worker, "_host", None)
    return getattr(host, "name", None) in C.LOCALHOST


@contextlib.contextmanager
def _display_stays_local() -> Iterator[None]:
    """2.16 - 2.18 ``_run`` routes the display through the results queue (a worker's display); here the
    run child *is* the display's owner, so that call must do nothing."""
    from ansible.utils.display import Display

    display = Display()
    display.set_queue = lambda queue: None  # instance attribute, shadows the method for this call
    try:
        yield
    finally:
        del display.set_queue


def _copy_for_run(worker: Any) -> Any:
    clone = copy.copy(worker)
    clone._host = copy.copy(worker._host)  # _run empties host.vars/groups: on this copy only
    clone._task = worker._task.copy()  # post_validate / squash rewrite its fields: the copy keeps _uuid
    clone._task_vars = dict(worker._task_vars)  # ansible_search_path, loop vars, 2.21's _task
    return clone


def run_in_process(worker: Any) -> None:
    """What a worker process would do for ``worker``: run its task, send the result to the queue."""
    clone = _copy_for_run(worker)
    stdin = None
    if hasattr(clone, "_save_stdin"):  # 2.16 - 2.18 hand the executor a stdin file of their own
        clone._save_stdin()
        stdin = clone._new_stdin
    try:
        with _display_stays_local(), ansible_compat.worker_task_context(clone):  # 2.21 builds results in it
            try:
                clone._run()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit too: a failed task, not the end of the run child
                try:
                    raise RuntimeError(f"the task's executor raised {type(exc).__name__}: {exc}") from exc
                except RuntimeError as failure:
                    ansible_compat.send_worker_failure(clone, failure)
    finally:
        if stdin is not None:
            stdin.close()


def install() -> None:
    """Patch ``WorkerProcess.start``: localhost tasks run in this process (see the module docstring)."""
    from ansible.executor.process.worker import WorkerProcess

    start = WorkerProcess.start

    def start_or_run_here(self: Any) -> None:
        if not _in_process(self):
            start(self)
            return
        run_in_process(self)

    WorkerProcess.start = start_or_run_here
