#!/usr/bin/env python3
"""CPU seconds of a command and everything it starts, by kind of process (Linux: reads /proc).

    python scripts/cpu_by_process.py -- ./dev.sh test -q tests/e2e
    python scripts/cpu_by_process.py --interval 0.2 -- .venv/bin/python -m pytest tests/examples

Where ``scripts/cpu_report.py`` says which *tests* cost, this says which *processes* do: operators (their
main process, the warm executor's zygote and its forked runs), ansible-playbook and its module processes
(each AnsiballZ module by name), kubectl, the control plane's components, pytest's workers. Every process on
the machine is sampled every ``--interval`` seconds while the command runs; a process's CPU is what it used
after the command started (so a control plane already running counts its share of the load). A process that
lives less than one interval may be missed: its CPU then shows nowhere (the table's total says what was
seen).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")


def kind(cmdline: list[str], parent: list[str]) -> str:
    """What a process is, from its command line (and its parent's, for the forks of a zygote)."""
    text = " ".join(cmdline)
    exe = os.path.basename(cmdline[0]) if cmdline and cmdline[0] else "?"
    if exe in COMPONENTS:
        return exe
    if "ansible_operator.executors.warm.zygote" in text:
        # the zygote's own preload vs the runs it forks (and their Ansible workers)
        return "zygote: runs" if "ansible_operator.executors.warm.zygote" in " ".join(parent) else "zygote"
    if "ansible_operator.executors.guard" in text:
        return "runner executor: guard"  # its ansible-playbook child is sampled as ansible-playbook
    module = re.search(r"AnsiballZ_(\w+)\.py", text)
    if module:
        return f"module {module.group(1)}"
    for needle, name in (("-m ansible_operator ", "operator"), ("bin/ansible-operator", "operator"),
                         ("ansible-playbook", "ansible-playbook"), ("molecule", "molecule"),
                         ("ansible_runner", "ansible-runner"), ("ansible-runner", "ansible-runner"),
                         ("exec(eval(sys.stdin.readline()))", "pytest worker"),  # execnet's bootstrap
                         ("pytest", "pytest"), ("tests.kube", "tests.kube")):
        if needle in text:
            return name
    if exe.startswith("python"):
        return "python " + " ".join(cmdline[1:3])[:40]
    return exe


@dataclass
class Seen:
    kind: str
    first: float
    last: float


def _read(pid: str) -> tuple[str, str, float] | None:
    """(start time, parent pid, CPU seconds) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19], fields[1], (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def sample(seen: dict[tuple[str, str], Seen], me: int, initial: bool) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        read = _read(pid)
        if read is None:
            continue
        started, ppid, cpu = read
        entry = seen.get((pid, started))
        if entry is None:
            # a process already running when the command started counts from here on
            seen[(pid, started)] = Seen(kind(_cmdline(pid), _cmdline(ppid)), cpu if initial else 0.0, cpu)
        else:
            entry.last = cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--interval", type=float, default=0.25, help="seconds between samples (default 0.25)")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to run after --")
    if not os.path.isdir("/proc/self"):
        p.error("needs Linux's /proc")
    seen: dict[tuple[str, str], Seen] = {}
    sample(seen, os.getpid(), initial=True)
    started = time.monotonic()
    proc = subprocess.Popen(command)
    try:
        while proc.poll() is None:
            sample(seen, os.getpid(), initial=False)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
    wall = time.monotonic() - started
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for entry in seen.values():
        used = entry.last - entry.first
        if used > 0:
            by_kind[entry.kind][0] += used
            by_kind[entry.kind][1] += 1
    total = sum(cpu for cpu, _ in by_kind.values())
    out = sys.stderr
    print(f"\n{' '.join(command)}: exit {proc.returncode} after {wall:.0f} s; {total:.0f} CPU s seen "
          f"({total / wall:.2f} cores on average)", file=out)
    print(f"  {'CPU s':>8}  {'share':>6}  {'procs':>6}  kind", file=out)
    for name, (cpu, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"  {cpu:8.1f}  {100 * cpu / total:5.1f} %  {int(count):6d}  {name}", file=out)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
