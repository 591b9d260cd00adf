"""``python -m ansible_operator.executors.guard OPERATOR_PID -- COMMAND...``: run COMMAND so that nothing
it starts outlives the operator.

The runner executor starts ``ansible-playbook`` through this guard (ansible-runner's ``binary``). The
guard is a child sub-reaper (every orphan below it -- module processes, ``shell``/``command`` children,
daemonised grandchildren in their own sessions -- re-parents to it) and asks for ``PR_SET_PDEATHSIG``:
when the operator dies, even by SIGKILL, the kernel sends the guard SIGTERM and it SIGKILLs every
process below it before exiting. SIGHUP (the run's pseudo-terminal closed with the operator) and SIGINT
do the same. Otherwise it waits for COMMAND and exits with its status, like ``exec`` would.
See :mod:`ansible_operator.executors.lifetime`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

from ansible_operator.executors.lifetime import become_subreaper, die_with_parent, kill_descendants


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stopping = False


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    # Once only. The operator's death brings several of these within milliseconds: PR_SET_PDEATHSIG's
    # SIGTERM on each re-parenting (to another thread of the dying operator, then to init) and the SIGHUP
    # of the pty's hang-up (we lead its session). When a second one is pending, Python runs its handler
    # at the first bytecode of the ``except _Stop`` block (``signal.signal`` itself runs pending handlers
    # first), so raising again there would end the guard before ``kill_descendants``: the run's
    # ansible-playbook and everything below it would live on, re-parented to init.
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise _Stop(signum)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m ansible_operator.executors.guard OPERATOR_PID -- COMMAND [ARGS...]",
              file=sys.stderr)
        return 2
    operator_pid, command = int(argv[0]), argv[2:]
    try:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, _raise_stop)
        become_subreaper()
        die_with_parent(signal.SIGTERM, expected_parent=operator_pid)
        child = subprocess.Popen(command)
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # cannot happen while the command runs; be safe
                return 1
            if pid == child.pid:
                code = os.waitstatus_to_exitcode(status)
                return code if code >= 0 else 128 - code
            # else: an orphan re-parented to us, now reaped
    except _Stop as stop:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)
        kill_descendants()
        return 128 + stop.signum


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
