"""executors/lifetime.py and executors/guard.py: a run's processes die with the operator, even on SIGKILL."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ansible_operator.executors import guard, lifetime

pytestmark = pytest.mark.ansible_versions


def _alive(marker: str, *, besides: tuple[int, ...] = ()) -> list[psutil.Process]:
    """Live processes with ``marker`` in an argument (the tree's shells and sleeps), except ``besides``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (proc.pid not in besides and any(marker in part for part in proc.info["cmdline"] or ())
                    and proc.status() != psutil.STATUS_ZOMBIE):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _marker() -> str:
    """A sleep duration no other process uses: it names the tree's shells and sleeps."""
    return f"3{secrets.randbelow(900) + 100}.{secrets.randbelow(900) + 100}"


def _wait(predicate, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _sleeps(procs: list[psutil.Process]) -> int:
    return sum(1 for p in procs if p.name() == "sleep")


def _wait_for_child(pid: int) -> int:
    assert _wait(lambda: bool(psutil.Process(pid).children()))
    return int(psutil.Process(pid).children()[0].pid)


def _tree_command(marker: str, out: Path) -> list[str]:
    """A shell with a child in its group and a grandchild that escapes into its own session: their shells
    and 2 ``sleep`` processes carry ``marker``; each inner sh writes a file if its sleep ever ends."""
    return ["sh", "-c", f"setsid sh -c 'sleep {marker}; touch {out}/grandchild' </dev/null >/dev/null 2>&1 & "
                        f"sh -c 'sleep {marker}; touch {out}/child'"]


def test_guard_exits_with_the_command_status() -> None:
    for code in (0, 3):
        done = subprocess.run([sys.executable, "-m", "ansible_operator.executors.guard", str(os.getpid()),
                               "--", "sh", "-c", f"exit {code}"], timeout=60, check=False)
        assert done.returncode == code
    assert guard.main(["1"]) == 2  # usage


def test_guard_kills_the_whole_tree_when_its_operator_is_sigkilled(tmp_path: Path) -> None:
    marker = _marker()
    command = _tree_command(marker, tmp_path)
    # a stand-in operator: starts the guard as the runner executor does, then waits forever
    fake_operator = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-m", "ansible_operator.executors.guard", str(os.getpid()), "--",
                          *{command!r}])
        time.sleep(600)
    """)
    operator = subprocess.Popen([sys.executable, "-c", fake_operator], start_new_session=True)
    try:
        guard_pid = _wait_for_child(operator.pid)
        me = (operator.pid, guard_pid)
        assert _wait(lambda: _sleeps(_alive(marker, besides=me)) == 2), _alive(marker, besides=me)
        operator.kill()
        operator.wait(30)
        assert _wait(lambda: not _alive(marker)), [p.cmdline() for p in _alive(marker)]  # guard included
        assert list(tmp_path.iterdir()) == []
    finally:
        for proc in _alive(marker, besides=(operator.pid,)):
            proc.kill()
        if operator.poll() is None:
            operator.kill()


def test_kill_descendants_reaches_processes_that_left_the_group(tmp_path: Path) -> None:
    marker = _marker()
    script = textwrap.dedent(f"""
        import subprocess, sys
        from ansible_operator.executors import lifetime
        assert lifetime.become_subreaper()
        shell = subprocess.Popen({_tree_command(marker, tmp_path)!r})
        sys.stdin.readline()           # the test saw the tree
        shell.kill()                   # the shell's children are orphans now, re-parented to us
        shell.wait()
        print(lifetime.kill_descendants(), flush=True)
        sys.stdin.readline()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert _wait(lambda: _sleeps(_alive(marker, besides=(proc.pid,))) == 2), _alive(marker)
        assert proc.stdin and proc.stdout
        proc.stdin.write("\n")
        proc.stdin.flush()
        killed = int(proc.stdout.readline())
        assert killed >= 3  # the grandchild's sh, the child's (if the shell did not exec it), both sleeps
        assert _alive(marker, besides=(proc.pid,)) == []
        assert list(tmp_path.iterdir()) == []
    finally:
        proc.kill()
        proc.wait()
        for left in _alive(marker, besides=(proc.pid,)):
            left.kill()


def test_descendants_lists_parents_before_children() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        assert _wait(lambda: len(lifetime.descendants(proc.pid)) == 1)
        (sleep,) = lifetime.descendants(proc.pid)
        order = lifetime.descendants()
        assert order.index(proc.pid) < order.index(sleep)
    finally:
        for pid in lifetime.descendants(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_guard_kills_the_tree_when_two_stop_signals_arrive_together(tmp_path: Path) -> None:
    """The operator's death reaches the guard several times within milliseconds: PR_SET_PDEATHSIG's SIGTERM
    (once per re-parenting) and the SIGHUP of its pseudo-terminal's hang-up (the guard leads the pty's
    session). With two pending when the guard runs again -- made certain here by stopping it while they
    are sent -- the second must not cut the first's clean-up short (it used to raise out of the
    ``except`` block: the guard died with a traceback, its tree lived on)."""
    marker = _marker()
    err = tmp_path / "stderr"
    with err.open("w") as stderr_file:  # a file, not a pipe: a surviving sleep would hold a pipe open
        proc = subprocess.Popen([sys.executable, "-m", "ansible_operator.executors.guard", str(os.getpid()),
                                 "--", "sleep", marker], stderr=stderr_file)
    try:
        assert _wait(lambda: _sleeps(_alive(marker, besides=(proc.pid,))) == 1), _alive(marker)
        os.kill(proc.pid, signal.SIGSTOP)
        assert _wait(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED)
        os.kill(proc.pid, signal.SIGTERM)
        os.kill(proc.pid, signal.SIGHUP)
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait(60)
        stderr = err.read_text()
        assert "Traceback" not in stderr, stderr
        assert proc.returncode in (128 + signal.SIGHUP, 128 + signal.SIGTERM), (proc.returncode, stderr)
        assert _alive(marker, besides=(proc.pid,)) == []  # the guard waited for its tree to be gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for left in _alive(marker, besides=(proc.pid,)):
            left.kill()
