"""Process lifetime: every process a run starts dies with the operator, even when the operator is SIGKILLed.

Unprivileged and cgroup-free, with two Linux primitives:

* ``PR_SET_PDEATHSIG``: the kernel signals a process when the thread that forked it dies. Each link of
  a run's chain that we start (zygote, run child, Ansible worker, forked module; the runner executor's
  guard) asks for it, so a kill of the operator reaches the first process below it at once.
* ``PR_SET_CHILD_SUBREAPER``: orphans re-parent to the nearest sub-reaper instead of init. The zygote and
  the runner executor's guard (:mod:`ansible_operator.executors.guard`) are sub-reapers, so everything a
  run starts -- module processes, ``shell``/``command`` children, their daemonised grandchildren, even in
  sessions or process groups of their own -- stays below them, and :func:`kill_descendants` finds it.

Imported by the zygote, its run children and the guard before Ansible: standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from typing import Iterator

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

__all__ = ["PR_SET_CHILD_SUBREAPER", "PR_SET_PDEATHSIG", "become_subreaper", "descendants", "die_with_parent",
           "kill_descendants", "kill_group", "prctl", "reap_children"]


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False where it is not available (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(signum: int = signal.SIGKILL, expected_parent: int | None = None) -> None:
    """Have the kernel send ``signum`` to this process when its parent dies.

    ``expected_parent``: the parent's pid as seen before the fork/exec; if it is already gone (the
    parent died before ``prctl`` ran, which the kernel would not report), signal ourselves now.
    """
    prctl(PR_SET_PDEATHSIG, signum)
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), signum)


def become_subreaper() -> bool:
    """Orphaned descendants re-parent to this process (Linux >= 3.4); False if not available."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def kill_group(pgid: int) -> None:
    """SIGKILL a process group; ESRCH (empty group) and EPERM are ignored.

    Safe after the group leader was reaped: Linux does not hand out a pid while a process group of that
    id still exists.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


def _children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` from /proc (every thread's list), without psutil's per-process scan."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                found.extend(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (default: this process), parents before their children."""
    root = os.getpid() if pid is None else pid
    order: list[int] = []
    queue = _children_of(root)
    seen = set(queue)
    while queue:
        current = queue.pop(0)
        order.append(current)
        for child in _children_of(current):
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return order


def reap_children() -> Iterator[tuple[int, int]]:
    """Reap every child that has exited, without blocking: yields ``(pid, wait status)`` for each.

    The one ``waitpid(-1, WNOHANG)`` loop of the zygote (which looks at each status) and of
    :func:`kill_descendants` (which drops them). Stops when no exited child is left.
    """
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            return
        yield pid, status


def _reap_any() -> None:
    for _ in reap_children():
        pass


def kill_descendants(timeout: float = 5.0, reap: bool = True) -> int:
    """SIGKILL everything below this process until nothing is left (or ``timeout``); returns how many.

    Parents are killed before their children, so a forking parent cannot add to the tree behind our
    back for long; their orphans re-parent to us (a sub-reaper) and are found in the next pass.
    ``reap``: also collect our own zombie children (the caller may prefer to ``waitpid`` them itself).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        victims = [pid for pid in descendants() if not _is_zombie(pid)]
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                continue
        if reap:
            _reap_any()
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if reap:
        _reap_any()
    return len(killed)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True  # gone
