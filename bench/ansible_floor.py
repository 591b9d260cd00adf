#!/usr/bin/env python3
"""What a warm run costs before any module runs: CPU per run of plays that call no module (issue 14).

    .venv/bin/python bench/ansible_floor.py [--runs 30]

Runs three playbooks through the warm executor directly (no operator, no API server), sequentially,
each with its fast path on and off, and prints the CPU the executor's process family spent per run
(the zygote and every process it forked, reaped ones included), as a ratio to the empty play of the
same setting measured in the same invocation:

* ``empty``: one play, no task: fork of the zygote, CLI, inventory, playbook load, TaskQueueManager,
  callbacks, stats, artifacts, exit: what any run costs;
* ``debug x4``: four templated ``debug`` tasks: the per-task machinery (strategy, task executor,
  templating, action plugin, callbacks, events) without any module process;
* ``debug x4 + set_fact``: the same with a ``set_fact`` and a ``when`` (conditionals, registered facts);
* ``module x4``: four ``ansible_operator.util.requeue_after`` tasks, a module that makes no API call: the
  Memcached role's shape (four module tasks) with every API call taken out, i.e. what Ansible itself costs
  per reconcile of that role, however fast the API is.

The CPU of one process is read from /proc in 10 ms clock ticks, so the figure is the total over all
timed runs divided by their number, not a median of per-run differences.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import cpu_seconds  # noqa: E402

from ansible_operator.collections import COLLECTIONS_ROOT  # noqa: E402
from ansible_operator.executors.base import RunRequest  # noqa: E402
from ansible_operator.executors.datadir import new_run_id  # noqa: E402
from ansible_operator.executors.warm.executor import WarmExecutor  # noqa: E402

_HEAD = "- hosts: localhost\n  gather_facts: false\n  tasks:\n"


def _debugs(*names: str) -> str:
    return "".join(f"    - debug: msg=\"{name} {{{{ who }}}}\"\n" for name in names)


PLAYS = {
    "empty": _HEAD.replace("tasks:\n", "tasks: []\n"),
    "debug x4": _HEAD + _debugs("one", "two", "three", "four"),
    "debug x4 + set_fact": _HEAD + _debugs("one", "two", "three")
    + "    - set_fact: {shout: \"{{ who | upper }}\"}\n"
    + "    - debug: msg=\"{{ shout }}\"\n      when: shout | length > 0\n",
    "module x4": _HEAD + "".join(f"    - ansible_operator.util.requeue_after: {{time: {n}s}}\n"
                                 for n in range(1, 5)),
}


def _family_cpu(executor_pid: int) -> float:
    return cpu_seconds(psutil.Process(executor_pid).children(recursive=True))


async def _measure(play: Path, fast_path: bool, runs: int, warmup: int, workdir: Path) -> dict[str, float]:
    executor = WarmExecutor(max_workers=1, fast_path=fast_path)
    await executor.start()
    try:
        async def one() -> None:
            rid = new_run_id()
            request = RunRequest(run_id=rid, private_data_dir=workdir / rid, extra_vars={"who": "bench"},
                                 playbook=play, envvars={"ANSIBLE_GATHERING": "explicit"},
                                 collections_path=(COLLECTIONS_ROOT,))
            outcome = await executor.run(request, lambda _event: None)
            if outcome.status != "successful":
                raise SystemExit(f"{play.name}: run ended {outcome.status}: {outcome.error}")

        for _ in range(warmup):
            await one()
        cpu0, wall0 = _family_cpu(os.getpid()), time.perf_counter()
        for _ in range(runs):
            await one()
        cpu, wall = _family_cpu(os.getpid()) - cpu0, time.perf_counter() - wall0
    finally:
        await executor.close()
    return {"cpu_ms": cpu / runs * 1000, "wall_ms": wall / runs * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    results: dict[tuple[str, bool], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ansible-floor-") as tmp:
        for name, text in PLAYS.items():
            play = Path(tmp) / f"{name.replace(' ', '_').replace('+', 'and')}.yml"
            play.write_text(text)
            for fast_path in (True, False):
                results[(name, fast_path)] = asyncio.run(
                    _measure(play, fast_path, args.runs, args.warmup, Path(tmp) / "runs"))
    print(f"warm executor, {args.runs} runs each after {args.warmup} warm-up runs; load average "
          f"{load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"{'play':<22} {'fast path':>9} {'CPU ms/run':>11} {'÷ empty':>8} {'wall ms/run':>12}")
    for (name, fast_path), figures in results.items():
        base = results[("empty", fast_path)]["cpu_ms"]
        print(f"{name:<22} {'on' if fast_path else 'off':>9} {figures['cpu_ms']:>11.1f}"
              f" {figures['cpu_ms'] / base:>7.2f}x {figures['wall_ms']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
